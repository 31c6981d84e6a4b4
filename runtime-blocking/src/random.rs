//! Unguessable ids from the operating system's random source, without a system call per id.
//!
//! Op ids, tokens and session ids must not be guessable, so every byte comes from
//! `getrandom(2)`; there is no fallback to anything weaker (a system without a working random
//! source cannot run connop). One call per operation started was the largest single piece of a
//! lifecycle's runtime layer, so small draws come from one process-wide pool, refilled
//! 384 bytes (64 op ids) at a time. One pool, not one per thread: a host that runs each operation on a
//! thread of its own would fill a pool per operation and keep its unused bytes.
//!
//! A draw never waits for the pool: one that finds it in use makes its own system call. So a
//! fork that copies the pool locked (another thread was drawing) leaves a child that draws
//! without it, and never deadlocks. A pool copied into a forked child would hand the child its
//! parent's next ids (a Python host forks), so a fork also empties it: the child's side of
//! `pthread_atfork` moves a generation counter on, and a pool filled in an older generation is
//! refilled before it is drawn from. Bytes drawn are wiped from the pool.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes fetched per refill: 64 op ids.
const POOL_BYTES: usize = 384;

/// Draws at most this large come from the pool; larger ones go to the system directly.
const MAX_POOLED: usize = 32;

/// Moved on in every forked child (and never otherwise): a pool of an older generation is
/// stale. `u64::MAX` means forks cannot be seen here, so nothing is pooled.
static GENERATION: AtomicU64 = AtomicU64::new(0);

struct Pool {
    bytes: [u8; POOL_BYTES],
    /// Bytes still to hand out, at the end of `bytes`.
    left: usize,
    /// The [`GENERATION`] the bytes were fetched in.
    generation: u64,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    bytes: [0; POOL_BYTES],
    left: 0,
    generation: 0,
});

/// Fills `bytes` from the operating system's cryptographic random source (`getrandom(2)` on
/// Linux): from the pool when the draw is small and the pool free, directly otherwise.
pub fn random_bytes(bytes: &mut [u8]) {
    if bytes.len() > MAX_POOLED {
        return fetch(bytes);
    }
    let generation = watch_forks();
    if generation == u64::MAX {
        return fetch(bytes);
    }
    // Never waits: a pool in use, or left locked by a thread a fork did not copy, is passed
    // by (a poisoned one too: only a failed refill poisons it, and that panicked already).
    let Ok(mut pool) = POOL.try_lock() else {
        return fetch(bytes);
    };
    if pool.generation != generation || pool.left < bytes.len() {
        fetch(&mut pool.bytes);
        pool.left = POOL_BYTES;
        pool.generation = generation;
    }
    let from = POOL_BYTES - pool.left;
    let drawn = &mut pool.bytes[from..from + bytes.len()];
    bytes.copy_from_slice(drawn);
    drawn.fill(0);
    pool.left -= bytes.len();
}

/// Six random bytes, for an op id.
pub fn entropy() -> [u8; 6] {
    let mut bytes = [0u8; 6];
    random_bytes(&mut bytes);
    bytes
}

/// One system call's worth of random bytes.
fn fetch(bytes: &mut [u8]) {
    if let Err(error) = getrandom::fill(bytes) {
        panic!("the operating system's random source failed: {error}");
    }
}

/// The current generation, after making sure a fork moves it on (the first call registers the
/// child's handler). `u64::MAX`: the handler could not be registered.
fn watch_forks() -> u64 {
    static REGISTER: std::sync::Once = std::sync::Once::new();
    REGISTER.call_once(|| {
        if !register_fork_handler() {
            GENERATION.store(u64::MAX, Ordering::Relaxed);
        }
    });
    GENERATION.load(Ordering::Relaxed)
}

#[cfg(unix)]
fn register_fork_handler() -> bool {
    /// Runs in the child, on the forking thread, before `fork` returns there: the same thread
    /// reads the new generation next, so relaxed ordering is enough. Async-signal-safe.
    extern "C" fn in_child() {
        let _ = GENERATION.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |g| {
            (g != u64::MAX).then(|| (g + 1) % u64::MAX)
        });
    }
    // SAFETY: registers a handler that touches only an atomic; no prepare or parent handler.
    unsafe { libc::pthread_atfork(None, None, Some(in_child)) == 0 }
}

#[cfg(not(unix))]
fn register_fork_handler() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_differ_and_wipe_what_they_take() {
        let ids: Vec<[u8; 6]> = (0..200).map(|_| entropy()).collect();
        let mut unique = ids.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), ids.len(), "200 ids, across pool refills");
        let pool = POOL.lock().unwrap();
        let taken = POOL_BYTES - pool.left;
        assert!(taken > 0);
        assert!(
            pool.bytes[..taken].iter().all(|b| *b == 0),
            "drawn bytes wiped"
        );
        drop(pool);
        // A large draw bypasses the pool and still fills every byte.
        let mut big = [0u8; 256];
        random_bytes(&mut big);
        assert!(big.iter().filter(|b| **b == 0).count() < 32);
    }

    /// A pool held elsewhere (or left locked in a forked child by a thread the fork did not
    /// copy) is passed by: the draw makes its own system call and never waits.
    #[test]
    fn a_draw_never_waits_for_a_locked_pool() {
        let held = POOL.lock().unwrap();
        let (a, b) = (entropy(), entropy());
        assert_ne!(a, b);
        drop(held);
    }

    /// A forked child must not repeat its parent's next id (the pool it inherits is stale).
    #[cfg(unix)]
    #[test]
    fn a_forked_child_draws_fresh_bytes() {
        // Fill the pool, so that the child inherits a pool with ids left in it.
        let _ = entropy();
        let mut pipe = [0i32; 2];
        // SAFETY: plain pipe(2) on a local array.
        assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
        // SAFETY: the child only draws (a try_lock that never waits, an atomic and
        // getrandom(2)), writes to the pipe and _exits: nothing that needs another thread.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let id = entropy();
            // SAFETY: writes 6 bytes from a local to the pipe, then leaves without unwinding.
            unsafe {
                libc::write(pipe[1], id.as_ptr().cast(), id.len());
                libc::_exit(0);
            }
        }
        let parent = entropy();
        let mut child = [0u8; 6];
        // SAFETY: reads at most 6 bytes into a local; waits for the child it forked.
        unsafe {
            libc::close(pipe[1]);
            assert_eq!(libc::read(pipe[0], child.as_mut_ptr().cast(), 6), 6);
            libc::close(pipe[0]);
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
        }
        assert_ne!(child, parent, "the child repeated its parent's next id");
    }
}
