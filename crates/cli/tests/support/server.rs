//! A `routerlab` server process for the tests and benches that run `engine` and `serve`:
//! started on a free port, its address read from the line it prints, killed when dropped.
//! Shared by `tests/live.rs` (through `support`) and `benches/serve_overhead.rs` (by path).

#![allow(dead_code)]

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};

/// A `routerlab` server process, killed when dropped.
pub struct Server {
    child: Child,
    /// `host:port` it listens on.
    pub addr: String,
}

impl Server {
    /// Starts `routerlab ARGS --listen 127.0.0.1:0` and reads the address it prints.
    pub fn start(args: &[&str]) -> Server {
        Server::start_on(args, "127.0.0.1:0")
    }

    /// Starts `routerlab ARGS --listen ADDR` and reads the address it prints.
    pub fn start_on(args: &[&str], listen: &str) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_routerlab"))
            .args(args)
            .args(["--listen", listen])
            .env_remove("ROUTERLAB_PLUGIN_PATH")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start routerlab");
        let mut line = String::new();
        BufReader::new(child.stderr.take().expect("stderr"))
            .read_line(&mut line)
            .expect("a first line");
        let addr = line
            .trim()
            .rsplit_once("http://")
            .map(|(_, addr)| addr.to_owned())
            .unwrap_or_else(|| panic!("{args:?} did not say where it listens: {line}"));
        Server { child, addr }
    }

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
