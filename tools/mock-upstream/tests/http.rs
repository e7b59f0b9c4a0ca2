//! The mock upstream over HTTP: 200 while under the hard limit, 429 beyond it, and the `/stats`
//! fields the demo and chaos harnesses read (`total`, `rejected`, `max_window`, `max_window_ratio`).

#[tokio::test]
async fn calls_over_the_limit_get_429_and_stats_count_every_call() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // A minute-long window: the four calls below certainly fall into one.
    tokio::spawn(async move { axum::serve(listener, leasehold_mock_upstream::router(3, 60_000)).await });
    let http = reqwest::Client::new();
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(http.post(format!("http://{addr}/call")).send().await.unwrap().status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
    let stats: serde_json::Value = http.get(format!("http://{addr}/stats")).send().await.unwrap().json().await.unwrap();
    assert_eq!(
        (&stats["limit"], &stats["window_ms"], &stats["total"], &stats["admitted"], &stats["rejected"]),
        (&3.into(), &60_000.into(), &4.into(), &3.into(), &1.into()),
        "{stats}"
    );
    assert_eq!((&stats["max_window"], &stats["max_window_ratio"]), (&3.into(), &1.0.into()), "{stats}");
}

async fn serve(limit: u64, window_ms: u64) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, leasehold_mock_upstream::router(limit, window_ms)).await });
    addr
}

async fn calls(http: &reqwest::Client, addr: std::net::SocketAddr, n: usize) -> Vec<u16> {
    let mut statuses = Vec::new();
    for _ in 0..n {
        statuses.push(http.post(format!("http://{addr}/call")).send().await.unwrap().status().as_u16());
    }
    statuses
}

#[tokio::test]
async fn a_lowered_limit_judges_the_calls_already_in_the_window() {
    // A minute-long window: every call below falls into one.
    let addr = serve(5, 60_000).await;
    let http = reqwest::Client::new();
    assert_eq!(calls(&http, addr, 3).await, [200, 200, 200]);
    let r = http.post(format!("http://{addr}/admin/limit?calls=3")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let after: serde_json::Value = r.json().await.unwrap();
    assert_eq!((&after["limit"], &after["limit_changes"]), (&3.into(), &1.into()), "{after}");
    assert!(after["limit_changed_at_ms"].is_u64(), "{after}");
    // The three calls of the old limit's window fill the new one: the next call is refused.
    assert_eq!(calls(&http, addr, 1).await, [429]);
    let stats: serde_json::Value = http.get(format!("http://{addr}/stats")).send().await.unwrap().json().await.unwrap();
    assert_eq!((&stats["total"], &stats["admitted"], &stats["rejected"]), (&4.into(), &3.into(), &1.into()), "{stats}");
    // Judged against the limit in force at each call: 3 of 5 at most, none admitted since.
    assert_eq!((&stats["max_window_ratio"], &stats["max_window_since_change"]), (&0.6.into(), &0.into()), "{stats}");
    // Raised again, the window has room: admitted and counted against the new limit.
    http.post(format!("http://{addr}/admin/limit?calls=4")).send().await.unwrap();
    assert_eq!(calls(&http, addr, 2).await, [200, 429]);
    let stats: serde_json::Value = http.get(format!("http://{addr}/stats")).send().await.unwrap().json().await.unwrap();
    assert_eq!((&stats["limit"], &stats["limit_changes"], &stats["rejected"]), (&4.into(), &2.into(), &2.into()));
    assert_eq!((&stats["max_window_ratio"], &stats["max_window_since_change"]), (&1.0.into(), &4.into()), "{stats}");
}

#[tokio::test]
async fn a_limit_change_without_a_positive_count_is_refused_and_changes_nothing() {
    let addr = serve(5, 1_000).await;
    let http = reqwest::Client::new();
    for query in ["calls=0", "calls=-1", "calls=many", ""] {
        let r = http.post(format!("http://{addr}/admin/limit?{query}")).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 400, "{query}");
    }
    let stats: serde_json::Value = http.get(format!("http://{addr}/stats")).send().await.unwrap().json().await.unwrap();
    assert_eq!((&stats["limit"], &stats["limit_changes"]), (&5.into(), &0.into()), "{stats}");
    assert!(stats["limit_changed_at_ms"].is_null(), "{stats}");
}
