//! `serve`'s side: start the host, call it under a deadline, and when it crashes or misses
//! the deadline, kill it and start another in the background while calls fail fast.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{BufReader, Write as _};
use std::os::unix::fs::DirBuilderExt as _;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::time::{Duration, Instant};

use super::wire::{self, Call, Reply, WireError};
use crate::LiveError;

/// How long a host may take to load its plugins and say hello.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Calls sent without waiting whose replies may be outstanding before `serve` reads them.
const MAX_PENDING: usize = 1024;
/// The longest wait between attempts to start a host that keeps failing to start.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(5);

/// How to start a host: this program with these arguments; `--connect SOCKET` is added.
#[derive(Debug, Clone)]
pub struct HostCommand {
    /// The program (`routerlab` itself).
    pub program: PathBuf,
    /// Its arguments: the subcommand and the plugins to load.
    pub args: Vec<OsString>,
}

/// Why a call got no answer from the plugins.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostFailure {
    /// The host died (or broke the protocol) during the call; it is being restarted.
    #[error("the plugin host crashed during `{call}`: {how}")]
    Crashed {
        /// The call being made.
        call: &'static str,
        /// How the host ended (`killed by signal 6 (SIGABRT)`), or what broke its channel.
        how: String,
    },
    /// The call took longer than the deadline; the host was killed and is being restarted.
    #[error("the plugin host did not answer `{call}` within {ms} ms and was killed")]
    MissedDeadline {
        /// The call being made.
        call: &'static str,
        /// The deadline, milliseconds.
        ms: u128,
    },
    /// A host is starting after an earlier failure.
    #[error("the plugin host is restarting after a failure")]
    Restarting,
}

/// A host that is up: the process and the channel to it.
struct Running {
    child: Child,
    stream: UnixStream,
    reader: BufReader<UnixStream>,
    endpoints: Vec<(String, u32)>,
    matcher: String,
}

enum Link {
    Up(Box<Running>),
    /// The starter is starting one.
    Starting,
}

/// The plugins, in a child process.
pub struct Host {
    deadline: Duration,
    link: Link,
    /// Asks the starter for a host (`true`: retry until one is up).
    start: Sender<bool>,
    /// The starter's hosts.
    started: Receiver<Result<Running, String>>,
    matcher: String,
    /// Which host's state the plugins have: 0 for the first, +1 each time one is lost.
    generation: u64,
    /// A host that is up and whose endpoints the caller has not taken yet.
    fresh: Option<Vec<(String, u32)>>,
    buf: Vec<u8>,
    /// Names of the calls sent without waiting whose replies are still to be read.
    pending: VecDeque<&'static str>,
    /// Failures the plugins reported for calls sent without waiting.
    pub late_failures: u64,
    /// Hosts that died during a call.
    pub crashes: u64,
    /// Hosts killed for missing the deadline.
    pub missed_deadlines: u64,
    /// Hosts started after the first.
    pub restarts: u64,
}

impl Host {
    /// Starts the first host and waits until its plugins are loaded; each later call may
    /// take at most `deadline`.
    pub fn start(command: HostCommand, deadline: Duration) -> Result<Host, LiveError> {
        let (start, requests) = std::sync::mpsc::channel();
        let (done, started) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("plugin-host-starter".into())
            .spawn(move || starter(&command, deadline, &requests, &done))
            .map_err(|e| LiveError::PluginHost(format!("a thread to start it: {e}")))?;
        let _ = start.send(false);
        let running = started
            .recv()
            .map_err(|_| LiveError::PluginHost("its starter thread ended".into()))?
            .map_err(LiveError::PluginHost)?;
        let matcher = running.matcher.clone();
        Ok(Host {
            deadline,
            link: Link::Up(Box::new(running)),
            start,
            started,
            matcher,
            generation: 0,
            fresh: None,
            buf: Vec::new(),
            pending: VecDeque::new(),
            late_failures: 0,
            crashes: 0,
            missed_deadlines: 0,
            restarts: 0,
        })
    }

    /// The matcher's name.
    pub fn matcher(&self) -> &str {
        &self.matcher
    }

    /// Which host's plugin state is current: a request one host learned is not reported to
    /// another (it changes the moment a host is lost, before the next is up).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The endpoints of the host that answers now, with the stable indices it gave them.
    pub fn endpoints(&self) -> &[(String, u32)] {
        match &self.link {
            Link::Up(running) => &running.endpoints,
            Link::Starting => &[],
        }
    }

    /// When a restarted host has come up since the last look: its endpoints (the whole
    /// starting fleet, with the indices it gave them), so the caller can tell it which of
    /// them are out. `None` while nothing changed.
    pub fn restarted(&mut self) -> Option<Vec<(String, u32)>> {
        if matches!(self.link, Link::Starting) {
            match self.started.try_recv() {
                Ok(Ok(running)) => {
                    self.fresh = Some(running.endpoints.clone());
                    self.link = Link::Up(Box::new(running));
                    self.restarts += 1;
                }
                // The starter retries until a host is up; it answers only with one.
                Ok(Err(_)) | Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => log("the plugin host's starter thread ended"),
            }
        }
        self.fresh.take()
    }

    /// Sends a call whose answer can wait (`update`, `on_first_token`, `on_complete`): its
    /// reply is read before the next call that waits for one, so the host works while
    /// `serve` proxies. A failure the plugin reports for it is counted in `late_failures`.
    pub fn send(&mut self, call: &Call) -> Result<(), HostFailure> {
        if self.pending.len() >= MAX_PENDING {
            self.drain()?;
        }
        let Link::Up(running) = &mut self.link else {
            return Err(HostFailure::Restarting);
        };
        if let Err(e) = wire::write_call(&mut running.stream, call) {
            return Err(self.fail(call.name(), e.into()));
        }
        self.pending.push_back(call.name());
        Ok(())
    }

    /// Makes `call` and waits for its reply (after those of the calls sent before it); the
    /// plugin's own failure is `Ok(Reply::Failed)`.
    pub fn call(&mut self, call: &Call) -> Result<Reply, HostFailure> {
        self.drain()?;
        let Link::Up(running) = &mut self.link else {
            return Err(HostFailure::Restarting);
        };
        let answered = wire::write_call(&mut running.stream, call)
            .map_err(WireError::from)
            .and_then(|()| wire::read_reply(&mut running.reader, &mut self.buf));
        let in_turn = |reply: &Reply| {
            matches!(
                (call, reply),
                (_, Reply::Failed { .. })
                    | (Call::Decide { .. }, Reply::Decided { .. })
                    | (Call::Add { .. }, Reply::Added { .. })
                    | (
                        Call::Learn { .. }
                            | Call::FirstToken { .. }
                            | Call::Complete { .. }
                            | Call::Remove { .. },
                        Reply::Done
                    )
            )
        };
        match answered {
            Ok(reply) if in_turn(&reply) => Ok(reply),
            Ok(_) => Err(self.fail(
                call.name(),
                WireError::Malformed("a reply out of turn".into()),
            )),
            Err(e) => Err(self.fail(call.name(), e)),
        }
    }

    /// Reads the replies of the calls sent without waiting.
    fn drain(&mut self) -> Result<(), HostFailure> {
        while let Some(&name) = self.pending.front() {
            let Link::Up(running) = &mut self.link else {
                self.pending.clear();
                return Err(HostFailure::Restarting);
            };
            match wire::read_reply(&mut running.reader, &mut self.buf) {
                Ok(Reply::Done) => {}
                Ok(Reply::Failed { .. }) => self.late_failures += 1,
                Ok(_) => {
                    return Err(self.fail(name, WireError::Malformed("a reply out of turn".into())));
                }
                Err(e) => return Err(self.fail(name, e)),
            }
            self.pending.pop_front();
        }
        Ok(())
    }

    /// The host failed `call`: it is killed, the failure logged and counted, and another
    /// started in the background.
    fn fail(&mut self, call: &'static str, why: WireError) -> HostFailure {
        self.pending.clear();
        let timed_out = matches!(&why, WireError::Io(e)
            if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut));
        let previous = std::mem::replace(&mut self.link, Link::Starting);
        let _ = self.start.send(true);
        self.generation += 1;
        let status = match previous {
            Link::Up(mut running) => {
                end(&mut running.child);
                running.child.wait().ok()
            }
            Link::Starting => None,
        };
        let failure = if timed_out {
            self.missed_deadlines += 1;
            HostFailure::MissedDeadline {
                call,
                ms: self.deadline.as_millis(),
            }
        } else {
            self.crashes += 1;
            let how = match (status, &why) {
                (Some(status), _) if !status.success() => describe(status),
                _ => format!("its channel: {why}"),
            };
            HostFailure::Crashed { call, how }
        };
        log(&format!(
            "{failure}; restarting it (matcher `{}`), and requests follow --on-plugin-error until it is up",
            self.matcher
        ));
        failure
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Link::Up(running) = &mut self.link {
            end(&mut running.child);
            let _ = running.child.wait();
        }
    }
}

/// The thread that starts hosts, so that every host has the same parent thread for its
/// whole life (a host asks to die with it: `PR_SET_PDEATHSIG` follows the thread that
/// started the process). Asked with `false`, it tries once and answers either way; with
/// `true`, it tries until a host is up, waiting longer after each failure.
fn starter(
    command: &HostCommand,
    deadline: Duration,
    requests: &Receiver<bool>,
    done: &Sender<Result<Running, String>>,
) {
    for retry in requests {
        let mut wait = Duration::from_millis(100);
        let running = loop {
            match spawn(command, deadline) {
                Ok(running) => break Ok(running),
                Err(why) if retry => {
                    log(&format!(
                        "the plugin host did not start again: {why}; next try in {} ms",
                        wait.as_millis()
                    ));
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(MAX_RETRY_WAIT);
                }
                Err(why) => break Err(why),
            }
        };
        if done.send(running).is_err() {
            return;
        }
    }
}

/// One line on stderr; a closed stderr is no reason to stop routing.
fn log(line: &str) {
    let _ = writeln!(std::io::stderr(), "routerlab serve: {line}");
}

/// How a process ended, in words: `exit status 2`, `killed by signal 6 (SIGABRT)`.
fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => {
            let name = match signal {
                4 => " (SIGILL)",
                6 => " (SIGABRT)",
                7 => " (SIGBUS)",
                8 => " (SIGFPE)",
                9 => " (SIGKILL)",
                11 => " (SIGSEGV)",
                15 => " (SIGTERM)",
                _ => "",
            };
            format!("killed by signal {signal}{name}")
        }
        (None, None) => "ended".to_owned(),
    }
}

static NEXT_SOCKET: AtomicU64 = AtomicU64::new(0);

/// A directory only this user may enter, holding the socket a host connects to; removed
/// when dropped (the connection, once made, needs neither).
struct SocketDir(PathBuf);

impl SocketDir {
    fn new() -> std::io::Result<SocketDir> {
        let dir = std::env::temp_dir().join(format!(
            "routerlab-plugins-{}-{}",
            std::process::id(),
            NEXT_SOCKET.fetch_add(1, Ordering::Relaxed)
        ));
        // A directory left by an earlier process of the same id.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        Ok(SocketDir(dir))
    }

    fn socket(&self) -> PathBuf {
        self.0.join("plugins.sock")
    }
}

impl Drop for SocketDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Ends a host and whatever its plugins started in its process group.
fn end(child: &mut Child) {
    routerlab_os::process::kill_group(child.id());
    let _ = child.kill();
}

/// Starts a host and waits for its hello.
fn spawn(command: &HostCommand, deadline: Duration) -> Result<Running, String> {
    let dir = SocketDir::new().map_err(|e| format!("a directory for its socket: {e}"))?;
    let path = dir.socket();
    let listener = UnixListener::bind(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    // A group of its own: whatever a plugin starts stays in it and ends with the host.
    let mut child = Command::new(&command.program)
        .process_group(0)
        .args(&command.args)
        .arg("--connect")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("{}: {e}", command.program.display()))?;
    let started = Instant::now();
    match accept(&listener, &mut child, started, &path) {
        Ok(stream) => match hello(stream, started, deadline) {
            Ok((stream, reader, endpoints, matcher)) => Ok(Running {
                child,
                stream,
                reader,
                endpoints,
                matcher,
            }),
            Err(why) => {
                end(&mut child);
                let status = child.wait().ok();
                Err(match status {
                    Some(status) if !status.success() => describe(status),
                    _ => why,
                })
            }
        },
        Err(why) => {
            end(&mut child);
            let _ = child.wait();
            Err(why)
        }
    }
}

/// Waits for the host to connect, or to exit first, or for [`STARTUP_TIMEOUT`].
fn accept(
    listener: &UnixListener,
    child: &mut Child,
    started: Instant,
    path: &Path,
) -> Result<UnixStream, String> {
    loop {
        match listener.accept() {
            Ok((stream, _)) => return Ok(stream),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!(
                        "it ended before it was ready: {}",
                        describe(status)
                    ));
                }
                if started.elapsed() > STARTUP_TIMEOUT {
                    return Err(format!(
                        "it was not ready within {} s",
                        STARTUP_TIMEOUT.as_secs()
                    ));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
    }
}

/// Reads the host's hello within what is left of [`STARTUP_TIMEOUT`], then sets the call
/// deadline on the channel: the channel, its reader, the endpoints and the matcher's name.
fn hello(stream: UnixStream, started: Instant, deadline: Duration) -> Result<Hello, String> {
    let io = |e: std::io::Error| format!("its channel: {e}");
    stream.set_nonblocking(false).map_err(io)?;
    let left = STARTUP_TIMEOUT
        .saturating_sub(started.elapsed())
        .max(Duration::from_millis(1));
    stream.set_read_timeout(Some(left)).map_err(io)?;
    let mut reader = BufReader::new(stream.try_clone().map_err(io)?);
    let reply =
        wire::read_reply(&mut reader, &mut Vec::new()).map_err(|e| format!("its hello: {e}"))?;
    let Reply::Hello { matcher, endpoints } = reply else {
        return Err("it did not start with a hello".into());
    };
    stream.set_read_timeout(Some(deadline)).map_err(io)?;
    stream.set_write_timeout(Some(deadline)).map_err(io)?;
    Ok((stream, reader, endpoints, matcher))
}

type Hello = (
    UnixStream,
    BufReader<UnixStream>,
    Vec<(String, u32)>,
    String,
);
