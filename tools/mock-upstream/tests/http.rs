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
