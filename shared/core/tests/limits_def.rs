//! Limits as data: human rates parse to exact milli-units rounding down, every bad input is a
//! typed error quoting it, definitions round-trip through the exact configuration, the legacy
//! exact form means the same as the human form, and misspelt fields are refused.

use leasehold_core::coordinator::LimitConfig;
use leasehold_core::limits::{
    format_amount, format_rate, parse_amount, parse_rate, DefFormat, Floor, LimitDef, LimitDefError, Rate, Tokens,
    ValueError,
};
use leasehold_core::quota::Quota;

#[test]
fn rates_parse_to_milli_per_second_rounding_down() {
    let cases: &[(&str, u64)] = &[
        ("976/s", 976_000),
        ("30000/min", 500_000),
        ("1000/10s", 100_000),
        ("0.5/s", 500),
        ("50/sec", 50_000),
        ("3600/h", 1_000),
        ("86400/day", 1_000),
        ("1/second", 1_000),
        ("120/seconds", 120_000),
        ("60/m", 1_000),
        ("120/minutes", 2_000),
        ("7200/hours", 2_000),
        ("172800/days", 2_000),
        ("2/d", 0), // 0.023 milli/s rounds down to nothing
        (" 976 / s ", 976_000),
        ("1000 / 10 s", 100_000),
        ("1000/min", 16_666), // 16.6666…: down, never up
        ("1/3s", 333),
        ("2/3s", 666),
        ("100/7s", 14_285),
        ("0.001/s", 1),
        ("0.001/min", 0),
        (".5/s", 500),
        ("0/s", 0),
    ];
    for (text, milli) in cases {
        assert_eq!(parse_rate(text), Ok(*milli), "{text}");
    }
}

#[test]
fn every_bad_rate_is_a_typed_error_that_quotes_it() {
    let not_a_rate = |s: &str| ValueError::NotARate { input: s.into() };
    assert_eq!(parse_rate("976"), Err(not_a_rate("976")));
    assert_eq!(parse_rate("976/"), Err(not_a_rate("976/")));
    assert_eq!(parse_rate("976/10"), Err(not_a_rate("976/10")));
    assert_eq!(
        parse_rate("976/fortnight"),
        Err(ValueError::UnknownPeriod { input: "976/fortnight".into(), unit: "fortnight".into() })
    );
    assert_eq!(parse_rate("976/-1s"), Err(ValueError::UnknownPeriod { input: "976/-1s".into(), unit: "-1s".into() }));
    assert_eq!(parse_rate("976/s/s"), Err(ValueError::UnknownPeriod { input: "976/s/s".into(), unit: "s/s".into() }));
    assert_eq!(parse_rate("10/0s"), Err(ValueError::ZeroPeriod { input: "10/0s".into() }));
    for (text, reason) in [
        ("1.2345/s", "more than 3 decimals"),
        ("-5/s", "only digits and one decimal point are allowed"),
        ("1e3/s", "only digits and one decimal point are allowed"),
        ("/s", "no digits"),
        ("5./s", "no digits after the decimal point"),
        ("1.2.3/s", "only digits and one decimal point are allowed"),
    ] {
        assert_eq!(parse_rate(text), Err(ValueError::RateAmount { input: text.into(), reason }), "{text}");
    }
    for huge in ["18446744073709552/s", "99999999999999999999/s", "1/99999999999999999999s", "1/999999999999999999d"] {
        assert_eq!(parse_rate(huge), Err(ValueError::TooLarge { input: huge.into() }), "{huge}");
    }
    let message = parse_rate("976/fortnight").unwrap_err().to_string();
    assert!(message.contains("\"976/fortnight\"") && message.contains("30000/min"), "{message}");
}

#[test]
fn amounts_are_exact_to_the_milli_token() {
    assert_eq!(parse_amount("20"), Ok(20_000));
    assert_eq!(parse_amount(" 0.5 "), Ok(500));
    assert_eq!(parse_amount("16.666"), Ok(16_666));
    assert_eq!(parse_amount("0"), Ok(0));
    assert_eq!(parse_amount("18446744073709551"), Ok(18_446_744_073_709_551_000));
    assert_eq!(parse_amount("18446744073709552"), Err(ValueError::TooLarge { input: "18446744073709552".into() }));
    for (text, reason) in [
        ("0.0001", "more than 3 decimals"),
        ("", "no digits"),
        ("1,5", "only digits and one decimal point are allowed"),
    ] {
        assert_eq!(parse_amount(text), Err(ValueError::NotAnAmount { input: text.into(), reason }), "{text:?}");
    }
    // As TOML or JSON numbers and strings.
    let burst = |json: &str| serde_json::from_str::<Tokens>(json).map(|t| t.milli).map_err(|e| e.to_string());
    assert_eq!(burst("20"), Ok(20_000));
    assert_eq!(burst("0.1"), Ok(100));
    assert_eq!(burst("\"6000\""), Ok(6_000_000));
    assert!(burst("-1").unwrap_err().contains("\"-1\""));
    assert!(burst("0.0001").unwrap_err().contains("more than 3 decimals"));
    assert!(burst("1e300").is_err());
    assert!(burst("true").is_err());
}

#[test]
fn values_print_back_in_the_form_that_parses_to_them() {
    assert_eq!(format_rate(976_000), "976/s");
    assert_eq!(format_rate(500_000), "500/s");
    assert_eq!(format_rate(16_666), "16.666/s");
    assert_eq!(format_rate(500), "0.5/s");
    assert_eq!(format_rate(0), "0/s");
    assert_eq!(format_amount(20_000), "20");
    assert_eq!(format_amount(10), "0.01");
    for milli in [0, 1, 10, 999, 1_000, 16_666, 976_000, u64::MAX] {
        assert_eq!(parse_rate(&format_rate(milli)), Ok(milli));
        assert_eq!(parse_amount(&format_amount(milli)), Ok(milli));
    }
}

const HUMAN: &str = r#"
limit = "partner-api"
rate = "976/s"
burst = 20
dc_ttl_ms = 10000
expiry = { max_drift = 0.01, grace_ms = 100, egress_spread_ms = 144 }

[[dcs]]
name = "bkk"
floor = "50/s"

[[dcs]]
name = "europe"
floor = "3000/min"
floor_burst = 2.5
weight = 2.0
"#;

const LEGACY: &str = r#"
limit = "partner-api"
quota = { rate_milli_per_s = 976000, burst_milli = 20000 }
dc_ttl_ms = 10000
expiry = { max_drift = 0.01, grace_ms = 100, egress_spread_ms = 144 }

[[dcs]]
name = "bkk"
floor = { rate_milli_per_s = 50000, burst_milli = 0 }

[[dcs]]
name = "europe"
floor = { rate_milli_per_s = 50000, burst_milli = 2500 }
weight = 2.0
"#;

fn one(text: &str, format: DefFormat) -> Result<LimitDef, LimitDefError> {
    let mut defs = LimitDef::parse_file_text(text, format)?;
    assert_eq!(defs.len(), 1);
    Ok(defs.remove(0))
}

#[test]
fn the_legacy_exact_form_means_the_same_as_the_human_form() {
    let human = one(HUMAN, DefFormat::Toml).unwrap().to_config().unwrap();
    let legacy = one(LEGACY, DefFormat::Toml).unwrap().to_config().unwrap();
    assert_eq!(human, legacy);
    assert_eq!(human.quota, Quota::new(976_000, 20_000));
    assert_eq!(human.dcs[1].floor, Quota::new(50_000, 2_500));
    assert_eq!(human.dcs[1].weight, 2.0);
    assert_eq!(human.expiry.egress_spread_ms, 144);
    assert_eq!(human.renew_interval_ms, LimitConfig::new("x", Quota::ZERO, &[]).renew_interval_ms, "a default");
}

#[test]
fn a_definition_round_trips_through_the_exact_configuration_and_json() {
    let def = one(HUMAN, DefFormat::Toml).unwrap();
    let config = def.to_config().unwrap();
    let back = LimitDef::from_config(&config);
    // BKK's floor gave no burst: the configuration holds its default (one token: 50/s is 5% of
    // the rate, and 5% of 20 tokens), and says so.
    let mut explicit = def.clone();
    explicit.dcs[0].floor_burst = Some(Tokens { milli: 1_000 });
    assert_eq!(back, explicit, "rates compare by value: \"3000/min\" is 50/s");
    assert_eq!(back.to_config().unwrap(), config);
    assert_eq!(back.dcs[1].floor, Floor::Rate(Rate::parse("50/s").unwrap()));
    // JSON keeps the author's text and reads back to the same definition.
    let json = def.to_json();
    let text = String::from_utf8(json.clone()).unwrap();
    assert!(text.contains("\"rate\":\"976/s\"") && text.contains("\"floor\":\"3000/min\""), "{text}");
    assert!(text.contains("\"floor_burst\":\"2.5\"") && text.contains("\"burst\":20"), "{text}");
    assert_eq!(LimitDef::from_json(&json).unwrap(), def);
    // The legacy form stays legacy in JSON and still means the same.
    let legacy = one(LEGACY, DefFormat::Toml).unwrap();
    assert_eq!(LimitDef::from_json(&legacy.to_json()).unwrap().to_config().unwrap(), config);
    // A JSON file may hold one definition or a list.
    assert_eq!(one(&text, DefFormat::Json).unwrap(), def);
    let many = format!("[{text}, {}]", text.replace("partner-api", "other"));
    assert_eq!(LimitDef::parse_file_text(&many, DefFormat::Json).unwrap().len(), 2);
}

#[test]
fn misspelt_fields_are_refused_everywhere() {
    for (typo, field) in [
        ("burts = 5", "burts"),
        ("[[dcs]]\nname = \"x\"\nflor = \"1/s\"", "flor"),
        ("expiry = { max_drfit = 0.01 }", "max_drfit"),
    ] {
        let text = format!("limit = \"a\"\nrate = \"1/s\"\nburst = 1\n{typo}\n[[dcs]]\nname = \"y\"\n");
        let err = one(&text, DefFormat::Toml).unwrap_err().to_string();
        assert!(err.contains(field), "{typo}: {err}");
    }
    let err = one(r#"{"limit":"a","quota":{"rate_milli_per_s":1,"burst_mili":1},"dcs":[]}"#, DefFormat::Json)
        .unwrap_err()
        .to_string();
    assert!(err.contains("burst_mili"), "{err}");
    assert!(!err.contains('\n'), "one line: {err}");
}

#[test]
fn definitions_that_cannot_run_are_refused_naming_the_limit() {
    let base = |extra: &str, dcs: &str| format!("limit = \"api\"\n{extra}\n{dcs}");
    let bkk = "[[dcs]]\nname = \"bkk\"\nfloor = \"50/s\"\n";
    let cases = [
        (base("rate = \"976/s\"", bkk), "burst is missing"),
        (base("burst = 20", bkk), "rate is missing"),
        (base("rate = \"1/s\"\nburst = 1\nquota = { rate_milli_per_s = 1, burst_milli = 1 }", bkk), "not both"),
        (base("rate = \"40/s\"\nburst = 20", bkk), "the DCs' floors (50/s burst 5) exceed the limit (40/s burst 20)"),
        (base("rate = \"976/s\"\nburst = 20", &format!("{bkk}floor_burst = 0.5\n")), "can never admit a call"),
        (base("rate = \"976/s\"\nburst = 20", &format!("{bkk}floor_burst = 0\n")), "floor_burst = 1 or more"),
        (base("rate = \"0.001/min\"\nburst = 20", bkk), "rate must be positive"),
        (base("rate = \"976/s\"\nburst = 20\ndcs = []", ""), "no data centers"),
        (base("rate = \"976/s\"\nburst = 20\ndc_ttl_ms = 500", bkk), "dc_ttl_ms"),
        (base("rate = \"976/s\"\nburst = 20\nv = 2", bkk), "schema version 2"),
        (base("rate = \"976/s\"\nburst = 20\nreserve = 1.5", bkk), "reserve"),
        (base("rate = \"976/s\"\nburst = 20\nexpiry = { max_drift = 0.7 }", bkk), "max_drift"),
        (base("rate = \"976/s\"\nburst = 20", "[[dcs]]\nname = \"a.b\"\n"), "bad DC name"),
        (base("rate = \"976/s\"\nburst = 20", "[[dcs]]\nname = \"a\"\nweight = -1.0\n"), "weight"),
        (base("rate = \"976/s\"\nburst = 20", &format!("{bkk}{bkk}")), "listed twice"),
        (
            base(
                "rate = \"976/s\"\nburst = 20",
                "[[dcs]]\nname = \"a\"\nfloor_burst = 1\nfloor = { rate_milli_per_s = 1, burst_milli = 0 }\n",
            ),
            "floor_burst",
        ),
    ];
    for (text, cause) in cases {
        let def = one(&text, DefFormat::Toml).unwrap_or_else(|e| panic!("{text}: {e}"));
        let err = def.to_config().unwrap_err();
        assert!(matches!(&err, LimitDefError::Invalid { limit, .. } if limit == "api"), "{text}: {err:?}");
        let shown = err.to_string();
        assert!(shown.starts_with("limit api: ") && shown.contains(cause), "{text}: {shown}");
        assert!(!shown.contains("limit api: limit api"), "{shown}");
    }
    let bad_name = LimitDef::new("a b", Rate::parse("1/s").unwrap(), Tokens { milli: 1_000 });
    assert!(bad_name.to_config().unwrap_err().to_string().contains("bad name"));
    // Values of the wrong form fail when read, quoting the value.
    for (text, quoted) in [
        (base("rate = \"976/fortnight\"\nburst = 20", bkk), "976/fortnight"),
        (base("rate = 976\nburst = 20", bkk), "a rate as a string"),
        (base("rate = \"976/s\"\nburst = \"lots\"", bkk), "lots"),
        (base("rate = \"976/s\"\nburst = 20", "[[dcs]]\nname = \"a\"\nfloor = \"5 per s\"\n"), "5 per s"),
    ] {
        let err = one(&text, DefFormat::Toml).unwrap_err();
        assert!(matches!(&err, LimitDefError::Parse(m) if m.contains(quoted)), "{text}: {err:?}");
    }
    let twice = format!("[[limits]]\n{HUMAN}\n[[limits]]\n{HUMAN}").replace("[[dcs]]", "[[limits.dcs]]");
    assert!(LimitDef::parse_file_text(&twice, DefFormat::Toml).unwrap_err().to_string().contains("defined twice"));
}

#[test]
fn a_floor_without_a_burst_gets_one_that_can_admit_calls() {
    let floor_of = |limit: &str, floor: &str| {
        let text = format!("limit = \"api\"\n{limit}\n[[dcs]]\nname = \"bkk\"\n{floor}\n");
        one(&text, DefFormat::Toml).unwrap().to_config().unwrap().dcs[0].floor
    };
    // 100 ms of the floor's rate, within the limit's burst in the floor's share of its rate.
    assert_eq!(floor_of("rate = \"1000/s\"\nburst = 6000", "floor = \"50/s\""), Quota::per_s(50, 5));
    assert_eq!(floor_of("rate = \"976/s\"\nburst = 20", "floor = \"50/s\""), Quota::per_s(50, 1));
    assert_eq!(floor_of("rate = \"1000/s\"\nburst = 6000", "floor = \"1/s\""), Quota::per_s(1, 1), "at least one");
    // The legacy exact form's burst 0 (which could never admit a call) gets the same default.
    let legacy = "floor = { rate_milli_per_s = 50000, burst_milli = 0 }";
    assert_eq!(floor_of("rate = \"1000/s\"\nburst = 6000", legacy), Quota::per_s(50, 5));
    // No floor, no burst; a burst given is kept.
    assert_eq!(floor_of("rate = \"1000/s\"\nburst = 6000", ""), Quota::ZERO);
    assert_eq!(floor_of("rate = \"1000/s\"\nburst = 6000", "floor = \"50/s\"\nfloor_burst = 12"), Quota::per_s(50, 12));
}

#[test]
fn the_shipped_coordinator_configuration_s_limits_parse() {
    let text = include_str!("../../../deploy/coordinator.toml");
    let defs = LimitDef::parse_file_text(text, DefFormat::Toml).unwrap();
    assert_eq!(defs.len(), 1);
    let config = defs[0].to_config().unwrap();
    assert_eq!(config.limit, "partner-api");
    assert_eq!(config.quota, Quota::new(966_000, 20_000));
    assert_eq!(config.floors(), Quota::new(100_000, 8_000), "a token for each of a DC's 4 pods");
    assert_eq!(config.expiry.egress_spread_ms, 144);
    let example = include_str!("../../../deploy/limits/partner-api.toml");
    let human = LimitDef::parse_file_text(example, DefFormat::Toml).unwrap();
    assert_eq!(human.len(), 1);
    assert_eq!(human[0].to_config().unwrap(), config, "the example says what the coordinator's file says");
}

#[test]
fn a_toml_error_is_one_line_that_says_where() {
    let text = format!("{HUMAN}\n[[dcs]]\nname = \"us\"\nfloor = \"5 per s\"\n");
    let err = one(&text, DefFormat::Toml).unwrap_err().to_string();
    assert!(err.starts_with("line 20: ") && err.contains("\"5 per s\" is not a rate"), "{err}");
    assert!(!err.contains('\n'), "{err}");
    let err = LimitDef::parse_file_text("limit = ", DefFormat::Toml).unwrap_err().to_string();
    assert!(err.starts_with("line 1: ") && !err.contains('\n'), "{err}");
}

/// docs/PROTOCOL.md's example documents are definitions that run.
#[test]
fn the_protocol_s_examples_are_valid_definitions() {
    let protocol = include_str!("../../../docs/PROTOCOL.md");
    let section = protocol.split("## Limits as data").nth(1).expect("the section").split("\n## ").next().unwrap();
    let json_block = section.split("```json\n").nth(1).unwrap().split("```").next().unwrap();
    let def = one(json_block, DefFormat::Json).unwrap();
    assert_eq!(def.to_config().unwrap().quota, Quota::new(966_000, 20_000));
    let put = section.lines().find(|l| l.starts_with("nats kv put lh_limits partner-api '")).unwrap();
    let doc = put.split('\'').nth(1).unwrap();
    assert_eq!(LimitDef::from_json(doc.as_bytes()).unwrap().to_config().unwrap().dcs.len(), 1);
}

#[test]
fn an_adaptive_limit_round_trips_and_its_defaults_and_typos_are_handled() {
    use leasehold_core::aimd::AdaptiveConfig;
    let text = "limit = \"api\"\nrate = \"966/s\"\nburst = 20\nadaptive = { decrease_factor = 0.8, min_calls = 50 }\n[[dcs]]\nname = \"bkk\"\n";
    let def = one(text, DefFormat::Toml).unwrap();
    let config = def.to_config().unwrap();
    let want = AdaptiveConfig { decrease_factor: 0.8, min_calls: 50, ..AdaptiveConfig::default() };
    assert_eq!(config.adaptive, Some(want));
    let back = LimitDef::from_config(&config);
    assert_eq!(back.to_config().unwrap(), config);
    assert_eq!(LimitDef::from_json(&back.to_json()).unwrap().to_config().unwrap(), config);
    // `adaptive = {}`: every default; no `adaptive`: off, and not written.
    let defaults = one(&text.replace("decrease_factor = 0.8, min_calls = 50", ""), DefFormat::Toml).unwrap();
    assert_eq!(defaults.to_config().unwrap().adaptive, Some(AdaptiveConfig::default()));
    let off =
        one(&text.replace("adaptive = { decrease_factor = 0.8, min_calls = 50 }\n", ""), DefFormat::Toml).unwrap();
    assert_eq!(off.to_config().unwrap().adaptive, None);
    assert!(!String::from_utf8(off.to_json()).unwrap().contains("adaptive"));
    // A misspelt field is refused; a factor out of range reads but cannot run.
    let err = one(&text.replace("min_calls", "min_cals"), DefFormat::Toml).unwrap_err().to_string();
    assert!(err.contains("min_cals"), "{err}");
    let err = one(&text.replace("0.8", "1.5"), DefFormat::Toml).unwrap().to_config().unwrap_err().to_string();
    assert!(err.contains("decrease_factor") && err.starts_with("limit api:"), "{err}");
}
