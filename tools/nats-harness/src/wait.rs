//! Bounded waits for tests: each panics with what it was waiting for and the last value seen.

use std::fmt::Debug;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long a test waits for a connection to a server it just started.
pub const CONNECT_WITHIN: Duration = Duration::from_secs(10);

/// A client of the server at `url` named `name`, retrying until [`CONNECT_WITHIN`]; panics with
/// the cause after that.
pub async fn client(url: &str, name: &str) -> async_nats::Client {
    client_with_creds(url, None, name).await
}

/// [`client`] as the user of a `.creds` file, if given.
pub async fn client_with_creds(url: &str, creds_file: Option<&std::path::Path>, name: &str) -> async_nats::Client {
    leasehold_nats::connect::connect_until_with_creds(url, creds_file, name, Instant::now() + CONNECT_WITHIN)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The first value of `rx` (the current one included) for which `f` holds, within `within`;
/// panics naming `what` and the last value otherwise.
pub async fn until<T: Clone + Debug>(
    rx: &mut watch::Receiver<T>,
    within: Duration,
    what: &str,
    f: impl Fn(&T) -> bool,
) -> T {
    let got = match tokio::time::timeout(within, rx.wait_for(|s| f(s))).await {
        Ok(Ok(s)) => Some(s.clone()),
        _ => None,
    };
    got.unwrap_or_else(|| panic!("not within {within:?}: {what}; last value {:?}", *rx.borrow()))
}

/// Asks `check` every `every` until it answers `Ok`, within `within`; panics naming `what` and the
/// last `Err` otherwise. For conditions nothing announces (another process's HTTP answers, a
/// bucket filling at its rate).
pub async fn poll<T>(
    within: Duration,
    every: Duration,
    what: &str,
    mut check: impl AsyncFnMut() -> Result<T, String>,
) -> T {
    let deadline = tokio::time::Instant::now() + within;
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let last = match check().await {
            Ok(v) => return v,
            Err(last) => last,
        };
        assert!(tokio::time::Instant::now() < deadline, "not within {within:?}: {what}; last seen {last}");
    }
}
