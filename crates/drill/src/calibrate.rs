//! Pressure calibration: fits committed-pressure weights to the latency
//! the drill observed, and says where the knee was. It only suggests:
//! the drill never changes a running configuration.
//!
//! Each point is one instance during one step of one run: the mean of its
//! sampled pressure components (active, speaking, delegating, recovering)
//! and the p95 of the replies heard by the sessions it owned that spoke in
//! that step. A least-squares fit `p95 ≈ b0 + b_a·active + b_s·speaking +
//! b_d·delegating + b_r·recovering` gives each component's cost; divided
//! by an active session's, those are the suggested weights (an active
//! session weighs 1). Too few points, a component that never varied, or a
//! non-positive cost of an active session leave the weights unfitted, and
//! the receipt says which.

use serde::{Deserialize, Serialize};

use crate::observed::Run;
use crate::slo::{conversational_replies, percentile, spoke_in};

/// Points a fit needs: more than its five coefficients.
pub const MIN_POINTS: usize = 8;

/// One instance in one step of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub run: u32,
    pub step: String,
    pub instance: String,
    /// Mean components: active, speaking, delegating, recovering.
    pub components: [f64; 4],
    /// Mean committed-pressure score under the running weights.
    pub score: f64,
    pub reply_p95_ms: f64,
}

/// The weights' values (an active session = 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Weights {
    pub speaking: f64,
    pub delegating: f64,
    pub recovering: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    pub points: usize,
    /// `None` with `unfitted` saying why.
    pub suggested: Option<Weights>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub unfitted: Option<String>,
    /// The lowest mean score at which a point's reply p95 exceeded the
    /// fixture's `reply_p95_ms`; `None`: no knee within the tested range.
    pub knee_score: Option<f64>,
    /// The reply p95 mark the knee is judged against.
    pub knee_reply_p95_ms: f64,
}

/// The points of `runs`.
/// `tool_utterance` as the fixture's roles name it (its reply is left out).
pub fn points(runs: &[Run], tool_utterance: usize) -> Vec<Point> {
    let mut out = Vec::new();
    for run in runs.iter().filter(|r| r.completed()) {
        for i in 0..run.steps.len() {
            let mut names: Vec<&str> = run
                .samples
                .iter()
                .filter(|s| s.step == i)
                .map(|s| s.instance.as_str())
                .collect();
            names.sort_unstable();
            names.dedup();
            for name in names {
                if let Some(p) = point(run, i, name, tool_utterance) {
                    out.push(p);
                }
            }
        }
    }
    out
}

fn point(run: &Run, step: usize, instance: &str, tool_utterance: usize) -> Option<Point> {
    let samples: Vec<_> = run
        .samples
        .iter()
        .filter(|s| s.step == step && s.instance == instance)
        .collect();
    let n = samples.len() as f64;
    let mean =
        |f: &dyn Fn(&crate::observed::Sample) -> f64| samples.iter().map(|s| f(s)).sum::<f64>() / n;
    let components = [
        mean(&|s| s.active as f64),
        mean(&|s| s.speaking as f64),
        mean(&|s| s.delegating as f64),
        mean(&|s| s.recovering as f64),
    ];
    let mut replies: Vec<f64> = run
        .sessions
        .iter()
        .filter(|s| s.owner.as_deref() == Some(instance) && spoke_in(run, step, s))
        .flat_map(|s| conversational_replies(s, tool_utterance))
        .collect();
    let reply_p95_ms = percentile(&mut replies, 95.0)?;
    Some(Point {
        run: run.number,
        step: run.steps[step].name.clone(),
        instance: instance.to_string(),
        components,
        score: mean(&|s| s.pressure_score),
        reply_p95_ms,
    })
}

/// Fits `points`; `knee_mark` is the fixture's reply p95 threshold.
pub fn calibrate(points: &[Point], knee_mark: f64) -> Calibration {
    let knee_score = points
        .iter()
        .filter(|p| p.reply_p95_ms > knee_mark)
        .map(|p| p.score)
        .min_by(f64::total_cmp);
    let (suggested, unfitted) = match fit(points) {
        Ok(w) => (Some(w), None),
        Err(why) => (None, Some(why)),
    };
    Calibration {
        points: points.len(),
        suggested,
        unfitted,
        knee_score,
        knee_reply_p95_ms: knee_mark,
    }
}

fn fit(points: &[Point]) -> Result<Weights, String> {
    if points.len() < MIN_POINTS {
        return Err(format!(
            "{} points, a fit needs at least {MIN_POINTS}",
            points.len()
        ));
    }
    for (i, name) in ["active", "speaking", "delegating", "recovering"]
        .iter()
        .enumerate()
    {
        let first = points[0].components[i];
        if points
            .iter()
            .all(|p| (p.components[i] - first).abs() < 1e-9)
        {
            return Err(format!("{name} never varied across the points"));
        }
    }
    // Normal equations of [1, components] → reply p95.
    let mut a = [[0.0f64; 5]; 5];
    let mut y = [0.0f64; 5];
    for p in points {
        let x = [
            1.0,
            p.components[0],
            p.components[1],
            p.components[2],
            p.components[3],
        ];
        for r in 0..5 {
            for c in 0..5 {
                a[r][c] += x[r] * x[c];
            }
            y[r] += x[r] * p.reply_p95_ms;
        }
    }
    let b = solve(a, y).ok_or("the components are collinear across the points")?;
    if b[1] <= 0.0 {
        return Err(format!(
            "an active session showed no cost ({:.3} ms per session)",
            b[1]
        ));
    }
    let w = |v: f64| ((v / b[1]).max(0.0) * 100.0).round() / 100.0;
    Ok(Weights {
        speaking: w(b[2]),
        delegating: w(b[3]),
        recovering: w(b[4]),
    })
}

/// Gaussian elimination with partial pivoting; `None` when singular.
fn solve(mut a: [[f64; 5]; 5], mut y: [f64; 5]) -> Option<[f64; 5]> {
    for col in 0..5 {
        let pivot = (col..5).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-9 {
            return None;
        }
        a.swap(col, pivot);
        y.swap(col, pivot);
        for row in col + 1..5 {
            let f = a[row][col] / a[col][col];
            let pivot_row = a[col];
            for (cell, p) in a[row].iter_mut().zip(pivot_row).skip(col) {
                *cell -= f * p;
            }
            y[row] -= f * y[col];
        }
    }
    let mut x = [0.0; 5];
    for row in (0..5).rev() {
        let tail: f64 = (row + 1..5).map(|k| a[row][k] * x[k]).sum();
        x[row] = (y[row] - tail) / a[row][row];
    }
    Some(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(c: [f64; 4], latency: f64) -> Point {
        Point {
            run: 1,
            step: "A".into(),
            instance: "a".into(),
            components: c,
            score: c[0] + c[1],
            reply_p95_ms: latency,
        }
    }

    #[test]
    fn known_costs_are_recovered_as_weights() {
        // 10 ms per active session, 30 per speaker, 50 per delegation, 20
        // per recovering session, 500 ms base.
        let cost = |c: [f64; 4]| 500.0 + 10.0 * c[0] + 30.0 * c[1] + 50.0 * c[2] + 20.0 * c[3];
        let pts: Vec<Point> = (0..12)
            .map(|i| {
                let i = f64::from(i);
                let c = [5.0 + i, (i * 7.0) % 5.0, (i * 3.0) % 4.0, (i * 5.0) % 3.0];
                p(c, cost(c))
            })
            .collect();
        let cal = calibrate(&pts, 600.0);
        let w = cal.suggested.expect("fitted");
        assert_eq!((w.speaking, w.delegating, w.recovering), (3.0, 5.0, 2.0));
        assert!(cal.knee_score.is_some(), "points above 600 ms exist");
    }

    #[test]
    fn too_few_or_flat_points_say_why_they_were_not_fitted() {
        let few = calibrate(&[p([1.0, 0.0, 0.0, 0.0], 500.0)], 600.0);
        assert!(few.unfitted.unwrap().contains("at least"));
        assert_eq!(few.knee_score, None);
        let flat: Vec<Point> = (0..10)
            .map(|i| p([f64::from(i), 1.0, 0.0, 0.0], 500.0))
            .collect();
        assert!(
            calibrate(&flat, 600.0)
                .unfitted
                .unwrap()
                .contains("speaking never varied")
        );
    }
}
