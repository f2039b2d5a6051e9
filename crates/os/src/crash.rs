//! Last words for a crash: which plugin, which call, which trace line.
//!
//! A plugin written in C can end the process outright (a segfault, an `abort()`), and a
//! mapped trace that another process truncates faults on the next read (SIGBUS). Without
//! this the user sees exit 139 and nothing else. So before each plugin call the host notes,
//! in thread-local cells, which plugin and which call is running (the names are `'static`:
//! plugin descriptors are never freed), and the drivers note the trace line; a fatal-signal
//! handler then writes one line from those cells with `write(2)` only (no allocation, no
//! locks: it must be async-signal-safe) and re-raises the signal with its default action,
//! so the exit status stays the honest one (134, 139, ...). One fault is no crash of a run
//! but bad input: a plugin library that faults while it is being loaded (truncated or
//! damaged) ends the process with exit status 2, as any other invalid plugin does.

use std::cell::Cell;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

/// What this thread is doing, as far as a crash report goes.
#[derive(Clone, Copy)]
struct Context {
    /// The plugin being called (`'static` bytes), or empty.
    plugin: &'static str,
    /// The call (`match_update`, ...), or empty.
    call: &'static str,
    /// The trace line of the request being routed; 0 = none.
    line: u64,
}

thread_local! {
    // `const` and without a destructor: reading it allocates nothing and registers
    // nothing, so the signal handler may read it.
    static CURRENT: Cell<Context> = const {
        Cell::new(Context { plugin: "", call: "", line: 0 })
    };
}

/// The last file mapped (for SIGBUS): its path's first bytes, and how many are valid
/// (0 while being written). Atomics, so the handler reads them without a lock.
static MAPPED_PATH: [AtomicU8; 512] = [const { AtomicU8::new(0) }; 512];
static MAPPED_LEN: AtomicUsize = AtomicUsize::new(0);

/// The plugin library being loaded (its path's first bytes), as for `MAPPED_PATH`.
static LOADING_PATH: [AtomicU8; 512] = [const { AtomicU8::new(0) }; 512];
static LOADING_LEN: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // Whether this thread is inside `dlopen` or a library's entry function.
    static LOADING: Cell<bool> = const { Cell::new(false) };
}

/// Notes that `call` of `plugin` is about to run on this thread.
#[inline]
pub fn enter(plugin: &'static str, call: &'static str) {
    CURRENT.with(|c| {
        let mut now = c.get();
        now.plugin = plugin;
        now.call = call;
        c.set(now);
    });
    crate::watchdog::enter(plugin, call);
}

/// Notes that the plugin call on this thread returned.
#[inline]
pub fn leave() {
    CURRENT.with(|c| {
        let mut now = c.get();
        now.plugin = "";
        now.call = "";
        c.set(now);
    });
    crate::watchdog::leave();
}

/// Notes the trace line of the request this thread routes next (0 = none).
#[inline]
pub fn set_trace_line(line: u64) {
    CURRENT.with(|c| {
        let mut now = c.get();
        now.line = line;
        c.set(now);
    });
    crate::watchdog::set_line(line);
}

/// Notes a file just mapped, so a SIGBUS while reading it can name it (its first 512
/// bytes).
pub fn note_mapped(path: &std::path::Path) {
    store_path(&MAPPED_PATH, &MAPPED_LEN, path);
}

/// Notes that this thread is about to load the plugin library `path` (`dlopen`, its entry
/// function): a library file that is truncated, or changes while it is mapped, faults
/// there, and the report must name the library, not a trace.
pub fn loading(path: &std::path::Path) {
    store_path(&LOADING_PATH, &LOADING_LEN, path);
    LOADING.with(|l| l.set(true));
}

/// Notes that the load this thread began is over.
pub fn loaded() {
    LOADING.with(|l| l.set(false));
}

fn store_path(slots: &[AtomicU8; 512], len: &AtomicUsize, path: &std::path::Path) {
    let text = path.to_string_lossy();
    let bytes = &text.as_bytes()[..text.len().min(slots.len())];
    len.store(0, Ordering::Release);
    for (slot, byte) in slots.iter().zip(bytes) {
        slot.store(*byte, Ordering::Relaxed);
    }
    len.store(bytes.len(), Ordering::Release);
}

/// Installs the handler for SIGSEGV, SIGBUS, SIGABRT, SIGILL and SIGFPE (once; later calls
/// do nothing). For the `routerlab` binary; a library embedding the host decides itself.
#[cfg(unix)]
pub fn install_fatal_signal_handler() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        // An alternate stack, so a stack overflow in a plugin still gets its last words.
        const STACK: usize = 64 * 1024;
        let stack: &'static mut [u8] = Box::leak(vec![0u8; STACK].into_boxed_slice());
        let alt = libc::stack_t {
            ss_sp: stack.as_mut_ptr().cast(),
            ss_flags: 0,
            ss_size: STACK,
        };
        // SAFETY: `alt` describes a leaked buffer that lives for the whole process.
        unsafe { libc::sigaltstack(&alt, std::ptr::null_mut()) };
        for signal in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGABRT,
            libc::SIGILL,
            libc::SIGFPE,
        ] {
            // SAFETY: a zeroed sigaction is a valid starting point; the handler is an
            // `extern "C" fn(c_int)` that only calls async-signal-safe functions; the
            // pointers passed are valid for the call.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_fatal_signal as *const () as libc::sighandler_t;
                action.sa_flags = libc::SA_RESETHAND | libc::SA_ONSTACK;
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(signal, &action, std::ptr::null_mut());
            }
        }
    });
}

/// Elsewhere there is no handler; crashes end the process as they would.
#[cfg(not(unix))]
pub fn install_fatal_signal_handler() {}

#[cfg(unix)]
extern "C" fn on_fatal_signal(signal: libc::c_int) {
    let now = CURRENT.with(Cell::get);
    let mut line = Line::default();
    line.push(b"routerlab: ");
    line.push(signal_name(signal));
    if LOADING.with(Cell::get) {
        line.push(b" while loading the plugin library ");
        let len = LOADING_LEN.load(Ordering::Acquire);
        for slot in &LOADING_PATH[..len] {
            line.push(&[slot.load(Ordering::Relaxed)]);
        }
        line.push(b": the file is damaged or truncated, or changed while it was loaded\n");
        // SAFETY: write(2) and _exit(2) are async-signal-safe; the buffer is on this stack.
        // The library is bad input, not a crash: the exit status says so (2), as for any
        // other plugin that cannot be loaded.
        unsafe {
            libc::write(2, line.bytes.as_ptr().cast(), line.len);
            libc::_exit(2);
        }
    } else if !now.plugin.is_empty() {
        line.push(b" in plugin `");
        line.push(now.plugin.as_bytes());
        line.push(b"` during `");
        line.push(now.call.as_bytes());
        line.push(b"`");
        if now.line > 0 {
            line.push(b", routing the request on trace line ");
            line.number(now.line);
        }
        line.push(b": the plugin crashed the process\n");
    } else if signal == libc::SIGBUS {
        line.push(b" reading a mapped file: the trace ");
        let len = MAPPED_LEN.load(Ordering::Acquire);
        for slot in &MAPPED_PATH[..len] {
            line.push(&[slot.load(Ordering::Relaxed)]);
        }
        if len > 0 {
            line.push(b" ");
        }
        line.push(b"changed size while being read\n");
    } else {
        line.push(b" outside any plugin call: a bug in routerlab, please report it\n");
    }
    // SAFETY: write(2) and raise(3) are async-signal-safe; the buffer is on this stack.
    unsafe {
        libc::write(2, line.bytes.as_ptr().cast(), line.len);
        // SA_RESETHAND restored the default action: dying of the same signal keeps the
        // exit status honest.
        libc::raise(signal);
    }
}

#[cfg(unix)]
fn signal_name(signal: libc::c_int) -> &'static [u8] {
    match signal {
        libc::SIGSEGV => b"SIGSEGV (invalid memory access)",
        libc::SIGBUS => b"SIGBUS (bus error)",
        libc::SIGABRT => b"SIGABRT (abort)",
        libc::SIGILL => b"SIGILL (illegal instruction)",
        libc::SIGFPE => b"SIGFPE (arithmetic fault)",
        _ => b"a fatal signal",
    }
}

/// A fixed buffer a signal handler can fill without allocating.
struct Line {
    bytes: [u8; 1024],
    len: usize,
}

impl Default for Line {
    fn default() -> Self {
        Line {
            bytes: [0; 1024],
            len: 0,
        }
    }
}

impl Line {
    fn push(&mut self, more: &[u8]) {
        let room = self.bytes.len() - self.len;
        let take = more.len().min(room);
        self.bytes[self.len..self.len + take].copy_from_slice(&more[..take]);
        self.len += take;
    }

    fn number(&mut self, mut n: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.push(&digits[i..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_buffer_formats_numbers_and_never_overflows() {
        let mut line = Line::default();
        line.push(b"line ");
        line.number(0);
        line.push(b" ");
        line.number(18_446_744_073_709_551_615);
        assert_eq!(&line.bytes[..line.len], b"line 0 18446744073709551615");
        line.push(&[b'x'; 2000]);
        assert_eq!(line.len, 1024);
    }

    #[test]
    fn the_context_is_per_thread() {
        enter("lcp", "match_update");
        set_trace_line(7);
        std::thread::spawn(|| {
            let now = CURRENT.with(Cell::get);
            assert_eq!((now.plugin, now.line), ("", 0));
        })
        .join()
        .unwrap();
        let now = CURRENT.with(Cell::get);
        assert_eq!((now.plugin, now.call, now.line), ("lcp", "match_update", 7));
        leave();
        assert_eq!(CURRENT.with(Cell::get).plugin, "");
    }
}
