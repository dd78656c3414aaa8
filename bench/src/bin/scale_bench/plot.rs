//! The PNG of one `scale_bench` suite: a 2×2 grid of log-log panels (memory, store size,
//! latency, start-up), one line per measure against the number of items, each panel with a
//! dashed grey line of slope 1 through its first series' first point, so a curve steeper than
//! the dashed line grows worse than linearly.
//!
//! Where it sits: called by `main.rs` once a suite's points are measured. Drawn with plotters'
//! bitmap backend only (no font backend: labels are `font.rs`'s bitmap glyphs).
//!
//! Invariants: only positive values are plotted (a log axis has no zero); a panel with nothing
//! positive is drawn empty with its title; nothing is drawn outside its panel.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::font;

/// One line: `(items, value)` points.
pub(crate) struct Series {
    pub(crate) name: String,
    pub(crate) points: Vec<(f64, f64)>,
}

/// One panel.
pub(crate) struct Panel {
    pub(crate) title: String,
    pub(crate) series: Vec<Series>,
}

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];
const INK: RGBColor = RGBColor(30, 30, 30);
const GRID: RGBColor = RGBColor(225, 225, 225);
const REFERENCE: RGBColor = RGBColor(150, 150, 150);

/// `1K`, `10K`, `1M`, `0.5`, `20`: short labels for log axes.
pub(crate) fn short(v: f64) -> String {
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            s
        }
    };
    if v >= 1e6 {
        format!("{}M", trim(format!("{:.1}", v / 1e6)))
    } else if v >= 1e3 {
        format!("{}K", trim(format!("{:.1}", v / 1e3)))
    } else if v >= 1.0 {
        trim(format!("{v:.1}"))
    } else {
        trim(format!("{v:.3}"))
    }
}

/// Writes the PNG.
pub(crate) fn render(path: &Path, title: &str, panels: &[Panel]) -> Result<(), String> {
    let root = BitMapBackend::new(path, (1400, 1000)).into_drawing_area();
    root.fill(&WHITE).map_err(|err| err.to_string())?;
    font::draw(&root, title, (20, 14), 3, &INK)?;
    let (_, body) = root.split_vertically(50);
    for (area, panel) in body.split_evenly((2, 2)).iter().zip(panels) {
        draw_panel(&root, area, panel)?;
    }
    root.present().map_err(|err| err.to_string())
}

/// Draws `panel` in `area`; its labels go on `root` (whose coordinates are the backend's
/// pixels, as `area.get_pixel_range()` and `chart.backend_coord()` give them; drawing on
/// `area` itself would be relative to its corner).
fn draw_panel<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
) -> Result<(), String> {
    let (xs, ys) = area.get_pixel_range();
    font::draw(root, &panel.title, (xs.start + 12, ys.start + 6), 2, &INK)?;
    // Legend under the title, wrapped onto a second line when it does not fit.
    let mut lx = xs.start + 12;
    let mut y = ys.start + 28;
    for (i, series) in panel.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let w = 22 + font::width(&series.name, 2) + 24;
        if lx > xs.start + 12 && lx + w > xs.end {
            lx = xs.start + 12;
            y += 20;
        }
        root.draw(&Rectangle::new(
            [(lx, y + 2), (lx + 16, y + 10)],
            color.filled(),
        ))
        .map_err(|err| err.to_string())?;
        font::draw(root, &series.name, (lx + 22, y), 2, &INK)?;
        lx += w;
    }
    let points: Vec<(f64, f64)> = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|(x, y)| *x > 0.0 && *y > 0.0)
        .collect();
    if points.is_empty() {
        return Ok(());
    }
    let (xmin, xmax) = bounds(points.iter().map(|p| p.0));
    let (ymin, ymax) = bounds(points.iter().map(|p| p.1));
    let (x_lo, x_hi) = (xmin / 1.6, xmax * 1.6);
    // At least two decades tall, so a flat line looks flat.
    let mid = (ymin * ymax).sqrt();
    let span = (ymax / ymin * 4.0).max(100.0).sqrt();
    let (y_lo, y_hi) = (mid / span, mid * span);
    let mut chart = ChartBuilder::on(area)
        .margin_top(72)
        .margin_left(80)
        .margin_bottom(36)
        .margin_right(24)
        .build_cartesian_2d((x_lo..x_hi).log_scale(), (y_lo..y_hi).log_scale())
        .map_err(|err| err.to_string())?;
    // Grid and ticks: the measured sizes on x, 1-2-5 steps on y.
    let mut x_ticks: Vec<f64> = points.iter().map(|p| p.0).collect();
    x_ticks.sort_by(f64::total_cmp);
    x_ticks.dedup();
    for &x in &x_ticks {
        chart
            .draw_series(LineSeries::new([(x, y_lo), (x, y_hi)], GRID))
            .map_err(|err| err.to_string())?;
        let (px, py) = chart.backend_coord(&(x, y_lo));
        let label = short(x);
        font::draw(
            root,
            &label,
            (px - font::width(&label, 2) / 2, py + 8),
            2,
            &INK,
        )?;
    }
    let mut decade = 10f64.powf(y_lo.log10().floor());
    let dense = y_hi / y_lo < 1e3;
    while decade < y_hi {
        let steps: &[f64] = if dense { &[1.0, 2.0, 5.0] } else { &[1.0] };
        for &m in steps {
            let y = decade * m;
            if y < y_lo || y > y_hi {
                continue;
            }
            chart
                .draw_series(LineSeries::new([(x_lo, y), (x_hi, y)], GRID))
                .map_err(|err| err.to_string())?;
            let (px, py) = chart.backend_coord(&(x_lo, y));
            let label = short(y);
            font::draw(
                root,
                &label,
                (px - font::width(&label, 2) - 8, py - font::HEIGHT),
                2,
                &INK,
            )?;
        }
        decade *= 10.0;
    }
    // Frame.
    let (fx, fy) = chart.plotting_area().get_pixel_range();
    root.draw(&Rectangle::new(
        [(fx.start, fy.start), (fx.end - 1, fy.end - 1)],
        INK,
    ))
    .map_err(|err| err.to_string())?;
    // Slope 1 through the first series' first point, clipped to the panel.
    if let Some(&(x0, y0)) = panel
        .series
        .first()
        .and_then(|s| s.points.iter().find(|(x, y)| *x > 0.0 && *y > 0.0))
    {
        let x1 = x_hi.min(x0 * y_hi / y0);
        let mut dashes = Vec::new();
        let steps = 40;
        for k in 0..steps {
            if k % 2 == 1 {
                continue;
            }
            let a = x0 * (x1 / x0).powf(f64::from(k) / f64::from(steps));
            let b = x0 * (x1 / x0).powf(f64::from(k + 1) / f64::from(steps));
            dashes.push(PathElement::new(
                vec![(a, y0 * a / x0), (b, y0 * b / x0)],
                REFERENCE.stroke_width(2),
            ));
        }
        chart.draw_series(dashes).map_err(|err| err.to_string())?;
    }
    for (i, series) in panel.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<(f64, f64)> = series
            .points
            .iter()
            .copied()
            .filter(|(x, y)| *x > 0.0 && *y > 0.0)
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(3)))
            .map_err(|err| err.to_string())?;
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 5, color.filled())))
            .map_err(|err| err.to_string())?;
    }
    Ok(())
}

fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    })
}
