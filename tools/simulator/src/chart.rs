//! The "follow the sun" picture: allocation vs demand per DC over the simulated day, as SVG.

use crate::metrics::Series;
use std::fmt::Write;

const COLORS: [&str; 4] = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd"];

/// Render `series` (one point per simulated second) to a self-contained SVG document.
pub fn svg(title: &str, dc_names: &[String], series: &Series, limit_per_s: f64) -> String {
    let (w, h, left, right, top, bottom) = (1000.0, 500.0, 60.0, 20.0, 40.0, 90.0);
    let n = series.demand.first().map_or(0, Vec::len).max(2);
    let ymax = (limit_per_s * 1.1).max(1.0);
    let x = |i: usize| left + (w - left - right) * i as f64 / (n - 1) as f64;
    let y = |v: f64| top + (h - top - bottom) * (1.0 - (v / ymax).clamp(0.0, 1.0));
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">
<rect width="{w}" height="{h}" fill="white"/>
<text x="{left}" y="24" font-size="15">{title}</text>
"#
    );
    for k in 0..=5 {
        let v = ymax * k as f64 / 5.0;
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{y}" y2="{y}" stroke="#eee"/><text x="{}" y="{}" text-anchor="end">{:.0}</text>"##,
            w - right,
            left - 6.0,
            y(v) + 4.0,
            v,
            y = y(v)
        );
    }
    let _ = writeln!(
        s,
        r##"<line x1="{left}" x2="{}" y1="{ly}" y2="{ly}" stroke="#000" stroke-dasharray="2,3"/><text x="{}" y="{}" text-anchor="end">limit</text>"##,
        w - right,
        w - right,
        y(limit_per_s) - 4.0,
        ly = y(limit_per_s)
    );
    for k in 0..=8 {
        let i = (n - 1) * k / 8;
        let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="middle">{}h</text>"#, x(i), h - bottom + 18.0, k * 3);
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="end">simulated day (UTC hours); requests/s</text>"#,
        w - right,
        h - bottom + 36.0
    );
    let path = |vals: &[f64]| -> String {
        let step = (vals.len() / 600).max(1);
        vals.iter()
            .enumerate()
            .step_by(step)
            .map(|(i, v)| format!("{:.1},{:.1}", x(i), y(*v)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    for (d, name) in dc_names.iter().enumerate() {
        let c = COLORS[d % COLORS.len()];
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{c}" stroke-width="1" stroke-dasharray="4,3" points="{}"/>"#,
            path(&series.demand[d])
        );
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#,
            path(&series.allocation[d])
        );
        let ly = h - bottom + 44.0 + 16.0 * d as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{}" x2="{}" y1="{ly}" y2="{ly}" stroke="{c}" stroke-width="2"/><text x="{}" y="{}">{name}: allocation (solid), demand (dashed)</text>"#,
            left,
            left + 30.0,
            left + 35.0,
            ly + 4.0
        );
    }
    s.push_str("</svg>\n");
    s
}
