//! routerlab-testkit: what the command line's tests and benches share, apart from either
//! (a bench cannot include a test's module): a `routerlab` server process, started on a
//! free port, its address read from the line it prints, killed when dropped. Not a
//! library for users; nothing else depends on it.

use std::io::{BufRead as _, BufReader, Read as _};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

/// A `routerlab` server process, killed when dropped.
pub struct Server {
    child: Child,
    /// `host:port` it listens on.
    pub addr: String,
    /// What it wrote on stderr after its first line (read all along, so it never blocks
    /// or fails writing).
    log: Arc<Mutex<String>>,
}

/// A `routerlab` binary to start servers from: a test's or bench's
/// `env!("CARGO_BIN_EXE_routerlab")`.
#[derive(Debug, Clone, Copy)]
pub struct Program(pub &'static str);

impl Program {
    /// Starts `routerlab ARGS --listen 127.0.0.1:0` and reads the address it prints.
    pub fn start(&self, args: &[&str]) -> Server {
        self.start_on(args, "127.0.0.1:0")
    }

    /// Starts `routerlab ARGS --listen ADDR` and reads the address it prints.
    pub fn start_on(&self, args: &[&str], listen: &str) -> Server {
        let mut command = Command::new(self.0);
        command.args(args).args(["--listen", listen]);
        Server::spawn(command, args)
    }

    /// Starts `routerlab ARGS --listen 127.0.0.1:0` with the environment variables `env`
    /// set for it (and what it starts).
    pub fn start_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut command = Command::new(self.0);
        command.args(args).args(["--listen", "127.0.0.1:0"]);
        command.envs(env.iter().copied());
        Server::spawn(command, args)
    }

    /// Starts `routerlab ARGS --listen 127.0.0.1:0` allowed at most `files` open file
    /// descriptors (`ulimit -n`, then `exec`, so the process is the server itself).
    pub fn start_with_file_limit(&self, args: &[&str], files: u32) -> Server {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!("ulimit -n {files} && exec \"$0\" \"$@\""))
            .arg(self.0)
            .args(args)
            .args(["--listen", "127.0.0.1:0"]);
        Server::spawn(command, args)
    }
}

impl Server {
    /// The process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn spawn(mut command: Command, args: &[&str]) -> Server {
        let mut child = command
            .env_remove("ROUTERLAB_PLUGIN_PATH")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start routerlab");
        let mut line = String::new();
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
        stderr.read_line(&mut line).expect("a first line");
        let log = Arc::new(Mutex::new(String::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n @ 1..) = stderr.read(&mut chunk) {
                let text = String::from_utf8_lossy(&chunk[..n]).into_owned();
                sink.lock().expect("log").push_str(&text);
            }
        });
        let addr = line
            .trim()
            .rsplit_once("http://")
            .map(|(_, addr)| addr.to_owned())
            .unwrap_or_else(|| panic!("{args:?} did not say where it listens: {line}"));
        Server { child, addr, log }
    }

    /// What it has written on stderr since it said where it listens.
    pub fn stderr(&self) -> String {
        self.log.lock().expect("log").clone()
    }

    /// `http://` and its address.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
