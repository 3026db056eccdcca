//! A real process crash: the `stele` binary appends durable records and prints each
//! acknowledged seq; it is killed with SIGKILL at random moments, 20 times, and after each kill
//! the log must hold every seq it printed. Half the runs use the component. Time-bounded: each
//! run lives 20 to 120 ms.

#![cfg(unix)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use stele_host::fs::RealFs;
use stele_host::{Mode, read_wal};

#[test]
fn sigkill_at_random_moments_loses_no_acknowledged_record() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("killed.wal");
    let mut acked = BTreeSet::new();
    let mut rng = 0x5eed_u64;
    let started = Instant::now();
    for run in 0..20 {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let lifetime = Duration::from_millis(20 + (rng >> 33) % 100);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_stele"));
        cmd.args(["wal", "soak"]).arg(&log).args(["--threads", "4"]);
        if run % 2 == 1 {
            cmd.args(["--mode", "sandboxed"]);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut seqs = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(seq) = line.strip_prefix("ack ") {
                    seqs.push(seq.parse::<u64>().unwrap());
                }
            }
            seqs
        });
        std::thread::sleep(lifetime);
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let printed = reader.join().unwrap();
        acked.extend(printed.iter().copied());

        let fs = Arc::new(RealFs::open_root(dir.path()).unwrap());
        let (records, recovery) = read_wal(fs, "killed.wal", Mode::Native).unwrap();
        let present: BTreeSet<u64> = records.iter().map(|r| r.seq.0).collect();
        let missing: Vec<_> = acked.difference(&present).take(5).collect();
        assert!(
            missing.is_empty(),
            "run {run}: acknowledged seqs {missing:?} lost ({:?})",
            recovery.end
        );
        assert_eq!(present.len() as u64, recovery.records);
    }
    assert!(!acked.is_empty(), "the child never acknowledged anything");
    // Written past libtest's output capture so that the line reaches the CI log.
    use std::io::Write;
    let _ = writeln!(
        std::io::stdout().lock(),
        "sigkill: 20 kills, {} acknowledged seqs all recovered, {:.1}s",
        acked.len(),
        started.elapsed().as_secs_f64()
    );
}
