//! The process's tie to the one that started it.

/// Asks the kernel to kill this process when the process that started it ends (Linux;
/// elsewhere nothing). For a helper process whose parent may be killed while the helper is
/// stuck in a call and so never reads that its channel closed.
pub fn die_with_parent() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_SET_PDEATHSIG takes a signal number and touches no memory of ours.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        }
    }
}
