//! The guide's Slurm job array, run on a real Slurm: a single-node cluster started for the
//! test (Debian's `slurm-wlm` and `munge`, which `cargo xtask ci` installs when they are
//! missing), in a scratch directory of its own: its own munge key and socket, its own
//! `slurm.conf` (`SLURM_CONF`), its own state, and free ports. The job file is the guide's
//! block, unchanged; `sbatch --array=0-7` runs it, and `routerlab merge` of the eight
//! shards must print exactly what the whole sweep prints.
//!
//! Slurm's daemons cannot listen on port 0 and say which port they got, so the ports are
//! found free by binding port 0 first and are then handed to Slurm.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{routerlab, texts, workspace_root};

/// The programs the test runs, with the package each comes from.
const PROGRAMS: [(&str, &str); 6] = [
    ("munged", "munge"),
    ("munge", "munge"),
    ("slurmctld", "slurm-wlm"),
    ("slurmd", "slurm-wlm"),
    ("sbatch", "slurm-wlm"),
    ("squeue", "slurm-wlm"),
];

/// How long the eight shards may take in all.
const JOB_DEADLINE: Duration = Duration::from_secs(900);

/// Where a program is, searching `PATH` and the `sbin` directories.
fn program(name: &str) -> PathBuf {
    let path = std::env::var("PATH").unwrap_or_default();
    let dirs = path
        .split(':')
        .map(PathBuf::from)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from));
    for dir in dirs {
        let candidate = dir.join(name);
        if candidate.is_file() {
            return candidate;
        }
    }
    let package = PROGRAMS
        .iter()
        .find(|(p, _)| *p == name)
        .map_or("", |p| p.1);
    panic!(
        "`{name}` is not installed: run `cargo xtask ci` (it installs Debian's slurm-wlm and munge), or `apt-get install slurm-wlm munge` ({package})"
    );
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind port 0");
    listener.local_addr().unwrap().port()
}

/// The single-node cluster: its daemons are stopped when it is dropped.
struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
}

impl Cluster {
    fn start(dir: &Path) -> Cluster {
        for (name, _) in PROGRAMS {
            program(name);
        }
        let _ = std::fs::remove_dir_all(dir);
        for sub in ["munge", "state", "spool", "log"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let munge = dir.join("munge");
        let mut key = vec![0u8; 1024];
        use std::io::Read as _;
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut key))
            .expect("a key from /dev/urandom");
        std::fs::write(munge.join("munge.key"), key).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&munge, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::set_permissions(
            munge.join("munge.key"),
            std::fs::Permissions::from_mode(0o400),
        )
        .unwrap();
        let socket = munge.join("munge.sock");
        run(Command::new(program("munged"))
            .arg(format!("--key-file={}", munge.join("munge.key").display()))
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--pid-file={}", munge.join("munged.pid").display()))
            .arg(format!("--log-file={}", munge.join("munged.log").display()))
            .arg(format!(
                "--seed-file={}",
                munge.join("munge.seed").display()
            ))
            // Root owns the scratch directory, which munged would otherwise refuse.
            .arg("--force"));
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .expect("the host name")
            .trim()
            .split('.')
            .next()
            .unwrap()
            .to_owned();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let d = dir.display();
        let conf = dir.join("slurm.conf");
        std::fs::write(
            &conf,
            format!(
                "ClusterName=routerlab\n\
                 SlurmctldHost={host}(127.0.0.1)\n\
                 SlurmctldPort={}\n\
                 SlurmdPort={}\n\
                 AuthType=auth/munge\n\
                 CredType=cred/munge\n\
                 AuthInfo=socket={}\n\
                 SlurmUser=root\n\
                 SlurmdUser=root\n\
                 StateSaveLocation={d}/state\n\
                 SlurmdSpoolDir={d}/spool\n\
                 SlurmctldPidFile={d}/slurmctld.pid\n\
                 SlurmdPidFile={d}/slurmd.pid\n\
                 SlurmctldLogFile={d}/log/slurmctld.log\n\
                 SlurmdLogFile={d}/log/slurmd.log\n\
                 ProctrackType=proctrack/linuxproc\n\
                 TaskPlugin=task/none\n\
                 SchedulerType=sched/builtin\n\
                 SelectType=select/cons_tres\n\
                 SelectTypeParameters=CR_CPU\n\
                 ReturnToService=2\n\
                 MpiDefault=none\n\
                 JobCompType=jobcomp/none\n\
                 AccountingStorageType=accounting_storage/none\n\
                 JobAcctGatherType=jobacct_gather/none\n\
                 NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN\n\
                 PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP\n",
                free_port(),
                free_port(),
                socket.display(),
            ),
        )
        .unwrap();
        let cluster = Cluster {
            dir: dir.to_owned(),
            conf,
        };
        // `-c`: a clean start, no state of an earlier cluster.
        run(cluster.slurm("slurmctld").arg("-c"));
        run(&mut cluster.slurm("slurmd"));
        cluster
    }

    /// A Slurm command of this cluster.
    fn slurm(&self, name: &str) -> Command {
        let mut command = Command::new(program(name));
        command.env("SLURM_CONF", &self.conf);
        command
    }

    /// What the daemons logged, for a failure's message.
    fn logs(&self) -> String {
        ["log/slurmctld.log", "log/slurmd.log"]
            .iter()
            .map(|f| {
                let text = std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                format!(
                    "{f}:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for pid_file in ["slurmd.pid", "slurmctld.pid", "munge/munged.pid"] {
            if let Ok(pid) = std::fs::read_to_string(self.dir.join(pid_file))
                && let Ok(pid) = pid.trim().parse::<i32>()
            {
                let _ = Command::new("kill").arg(pid.to_string()).status();
            }
        }
    }
}

/// Runs `command` to success.
fn run(command: &mut Command) {
    let output = command.stdin(Stdio::null()).output().expect("run");
    assert!(
        output.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A guide's job file: its `bash` block that starts `# NAME`.
fn readme_job(guide: &str, name: &str) -> String {
    let readme = std::fs::read_to_string(workspace_root().join("docs/guide").join(guide)).unwrap();
    let start = readme
        .find(&format!("```bash\n#!/bin/bash\n# {name}"))
        .expect("the guide's Slurm job file");
    let body = &readme[start + "```bash\n".len()..];
    body[..body.find("```").unwrap()].to_owned()
}

/// Submits `file` as a job array and waits until it has left the queue; its job id.
fn submit(cluster: &Cluster, work: &Path, path: &str, array: &str, file: &str) -> String {
    let submitted = cluster
        .slurm("sbatch")
        .args([array, "--parsable", file])
        .current_dir(work)
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(
        submitted.status.success(),
        "sbatch: {}\n{}",
        String::from_utf8_lossy(&submitted.stderr),
        cluster.logs()
    );
    let job = String::from_utf8_lossy(&submitted.stdout).trim().to_owned();
    let started = Instant::now();
    loop {
        let queued = cluster
            .slurm("squeue")
            .args(["-h", "-j", &job])
            .output()
            .unwrap();
        if queued.status.success() && queued.stdout.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < JOB_DEADLINE,
            "job {job} not done in {JOB_DEADLINE:?}: {}\n{}",
            String::from_utf8_lossy(&queued.stdout),
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    job
}

#[test]
fn the_readmes_slurm_job_array_merges_into_the_whole_sweep() {
    let dir = std::env::temp_dir().join(format!("routerlab-slurm-{}", std::process::id()));
    let cluster = Cluster::start(&dir.join("cluster"));
    // The job runs where the guide's commands run: a directory with `examples/` (whose
    // sweep names `../traces/`), `routerlab` and its plugins on `PATH`.
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    for sub in ["examples", "traces"] {
        std::os::unix::fs::symlink(workspace_root().join(sub), work.join(sub)).unwrap();
    }
    std::fs::write(
        work.join("sweep.sbatch"),
        readme_job("compare-and-sweep.md", "sweep.sbatch"),
    )
    .unwrap();
    std::fs::write(
        work.join("recommend.sbatch"),
        readme_job("recommend.md", "recommend.sbatch"),
    )
    .unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_routerlab")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let job = submit(&cluster, &work, &path, "--array=0-7", "sweep.sbatch");
    let shards: Vec<String> = (0..8)
        .map(|i| work.join(format!("shard-{i}.jsonl")).display().to_string())
        .collect();
    for (i, shard) in shards.iter().enumerate() {
        let log =
            std::fs::read_to_string(work.join(format!("slurm-{job}_{i}.out"))).unwrap_or_default();
        assert!(Path::new(shard).exists(), "task {i} wrote no shard: {log}");
    }
    let mut merge = vec!["merge"];
    merge.extend(shards.iter().map(String::as_str));
    let merged = routerlab(&merge);
    assert!(merged.status.success(), "merge: {}", texts(&merged).1);
    let sweep = workspace_root().join("examples/sweep.yaml");
    let whole = routerlab(&["sweep", sweep.to_str().unwrap(), "--jobs", "2", "--quiet"]);
    assert!(whole.status.success(), "sweep: {}", texts(&whole).1);
    assert!(!whole.stdout.is_empty());
    assert_eq!(
        texts(&merged).0,
        texts(&whole).0,
        "the merged shards print what the whole sweep prints"
    );

    // The guide's recommend job: four shards of one search, ranked by `--merge` exactly as
    // the same four shards run here one after the other.
    let job = submit(&cluster, &work, &path, "--array=0-3", "recommend.sbatch");
    let file = workspace_root().join("examples/recommend.yaml");
    let file = file.to_str().unwrap();
    let merge = |shards: &[String]| {
        let mut args = vec!["recommend", file, "--trials", "64", "--merge"];
        args.extend(shards.iter().map(String::as_str));
        let out = routerlab(&args);
        assert!(out.status.success(), "merge: {}", texts(&out).1);
        texts(&out).0
    };
    let on_slurm: Vec<String> = (0..4)
        .map(|i| work.join(format!("search-{i}.jsonl")).display().to_string())
        .collect();
    for (i, shard) in on_slurm.iter().enumerate() {
        let log =
            std::fs::read_to_string(work.join(format!("slurm-{job}_{i}.out"))).unwrap_or_default();
        assert!(Path::new(shard).exists(), "task {i} wrote no shard: {log}");
    }
    let here: Vec<String> = (1..=4)
        .map(|i| {
            let out = dir.join(format!("here-{i}.jsonl"));
            let shard = format!("{i}/4");
            let ran = routerlab(&[
                "recommend",
                file,
                "--trials",
                "64",
                "--quiet",
                "--partition",
                &shard,
                "-o",
                out.to_str().unwrap(),
            ]);
            assert!(ran.status.success(), "{}", texts(&ran).1);
            out.display().to_string()
        })
        .collect();
    let ranking = merge(&on_slurm);
    assert!(ranking.contains("64 candidates:"), "{ranking}");
    assert_eq!(
        ranking,
        merge(&here),
        "the shards ranked as the same shards run here"
    );
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}
