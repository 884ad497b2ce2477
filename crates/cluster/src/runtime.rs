//! openraft's async runtime: tokio's, with a random source that a simulation can seed.
//!
//! openraft draws its election timeouts and tick jitter from
//! [`AsyncRuntime::thread_rng`]. Tokio's runtime answers with the operating system's
//! randomness, so no two runs of a cluster elect alike. This runtime is tokio's in every
//! other respect; its random numbers come from a per-thread generator that is seeded from
//! the operating system on first use, or from a seed given with [`seed_thread_rng`]. The
//! deterministic simulator (`crates/simulator`) runs a whole cluster on one thread and
//! seeds it from its run's seed, so the same seed elects the same leaders at the same
//! virtual times.

use std::cell::RefCell;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use openraft::{AsyncRuntime, OptionalSend, TokioRuntime};
use rand_openraft::rngs::SmallRng;
use rand_openraft::{Rng as _, SeedableRng};

thread_local! {
    static RNG: RefCell<Option<SmallRng>> = const { RefCell::new(None) };
}

/// Seeds this thread's generator: every later draw on this thread follows from `seed`.
pub fn seed_thread_rng(seed: u64) {
    RNG.with(|rng| *rng.borrow_mut() = Some(SmallRng::seed_from_u64(seed)));
}

fn os_seed() -> u64 {
    // std's hash keys come from the operating system's randomness.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(std::process::id().into());
    hasher.finish()
}

/// Tokio, with [`AsyncRuntime::thread_rng`] drawn from this thread's seedable generator.
#[derive(Debug)]
pub struct Runtime(TokioRuntime);

impl AsyncRuntime for Runtime {
    type JoinError = <TokioRuntime as AsyncRuntime>::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::JoinHandle<T>;
    type Sleep = <TokioRuntime as AsyncRuntime>::Sleep;
    type Instant = <TokioRuntime as AsyncRuntime>::Instant;
    type TimeoutError = <TokioRuntime as AsyncRuntime>::TimeoutError;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = <TokioRuntime as AsyncRuntime>::Timeout<R, T>;
    type ThreadLocalRng = SmallRng;

    #[inline]
    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        TokioRuntime::spawn(future)
    }

    #[inline]
    fn sleep(duration: Duration) -> Self::Sleep {
        TokioRuntime::sleep(duration)
    }

    #[inline]
    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        TokioRuntime::sleep_until(deadline)
    }

    #[inline]
    fn timeout<R, F: Future<Output = R> + OptionalSend>(duration: Duration, future: F) -> Self::Timeout<R, F> {
        TokioRuntime::timeout(duration, future)
    }

    #[inline]
    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(deadline: Self::Instant, future: F) -> Self::Timeout<R, F> {
        TokioRuntime::timeout_at(deadline, future)
    }

    #[inline]
    fn is_panic(join_error: &Self::JoinError) -> bool {
        TokioRuntime::is_panic(join_error)
    }

    /// A generator of its own, seeded from this thread's: one draw from the thread's
    /// generator per call, so a seeded thread's sequence of calls is reproducible.
    fn thread_rng() -> Self::ThreadLocalRng {
        RNG.with(|rng| {
            let mut rng = rng.borrow_mut();
            let rng = rng.get_or_insert_with(|| SmallRng::seed_from_u64(os_seed()));
            SmallRng::seed_from_u64(rng.next_u64())
        })
    }

    type Mpsc = <TokioRuntime as AsyncRuntime>::Mpsc;
    type Watch = <TokioRuntime as AsyncRuntime>::Watch;
    type Oneshot = <TokioRuntime as AsyncRuntime>::Oneshot;
    type Mutex<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::Mutex<T>;

    fn new(threads: usize) -> Self {
        Runtime(TokioRuntime::new(threads))
    }

    fn block_on<F, T>(&mut self, future: F) -> T
    where
        F: Future<Output = T>,
    {
        self.0.block_on(future)
    }
}

#[cfg(test)]
mod tests {
    use rand_openraft::RngExt as _;

    use super::*;

    #[test]
    fn a_seeded_thread_draws_the_same_numbers_again() {
        let draw = || -> Vec<u64> { (0..4).map(|_| Runtime::thread_rng().random_range(150..300)).collect() };
        seed_thread_rng(7);
        let first = draw();
        seed_thread_rng(7);
        assert_eq!(draw(), first);
        seed_thread_rng(8);
        assert_ne!(draw(), first);
    }
}
