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
//! session weighs 1). A component that never varied across the points is
//! left out of the fit and named (its running weight stands). Too few
//! points, active sessions that never varied, collinear components or a
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

/// The weights' values (an active session = 1); `None` for a component
/// that never varied across the points (nothing to fit it from: keep the
/// running weight).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Weights {
    pub speaking: Option<f64>,
    pub delegating: Option<f64>,
    pub recovering: Option<f64>,
    /// The components left out, named.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub never_varied: Vec<String>,
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

const NAMES: [&str; 4] = ["active", "speaking", "delegating", "recovering"];

fn fit(points: &[Point]) -> Result<Weights, String> {
    if points.len() < MIN_POINTS {
        return Err(format!(
            "{} points, a fit needs at least {MIN_POINTS}",
            points.len()
        ));
    }
    let varied: Vec<usize> = (0..4)
        .filter(|&i| {
            let first = points[0].components[i];
            points
                .iter()
                .any(|p| (p.components[i] - first).abs() >= 1e-9)
        })
        .collect();
    if varied.first() != Some(&0) {
        return Err("active never varied across the points".into());
    }
    // Normal equations of [1, the varied components] → reply p95.
    let n = varied.len() + 1;
    let mut a = vec![vec![0.0f64; n]; n];
    let mut y = vec![0.0f64; n];
    for p in points {
        let x: Vec<f64> = std::iter::once(1.0)
            .chain(varied.iter().map(|&i| p.components[i]))
            .collect();
        for r in 0..n {
            for c in 0..n {
                a[r][c] += x[r] * x[c];
            }
            y[r] += x[r] * p.reply_p95_ms;
        }
    }
    let b = solve(a, y).ok_or("the components are collinear across the points")?;
    let per_active = b[1];
    if per_active <= 0.0 {
        return Err(format!(
            "an active session showed no cost ({per_active:.3} ms per session)"
        ));
    }
    let weight = |component: usize| {
        let k = varied.iter().position(|&i| i == component)?;
        Some(((b[k + 1] / per_active).max(0.0) * 100.0).round() / 100.0)
    };
    Ok(Weights {
        speaking: weight(1),
        delegating: weight(2),
        recovering: weight(3),
        never_varied: (1..4)
            .filter(|i| !varied.contains(i))
            .map(|i| NAMES[i].to_string())
            .collect(),
    })
}

/// Gaussian elimination with partial pivoting; `None` when singular.
fn solve(mut a: Vec<Vec<f64>>, mut y: Vec<f64>) -> Option<Vec<f64>> {
    let n = y.len();
    for col in 0..n {
        let pivot = (col..n).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-9 {
            return None;
        }
        a.swap(col, pivot);
        y.swap(col, pivot);
        for row in col + 1..n {
            let f = a[row][col] / a[col][col];
            let pivot_row = a[col].clone();
            for (cell, p) in a[row].iter_mut().zip(pivot_row).skip(col) {
                *cell -= f * p;
            }
            y[row] -= f * y[col];
        }
    }
    let mut x = vec![0.0; n];
    for row in (0..n).rev() {
        let tail: f64 = (row + 1..n).map(|k| a[row][k] * x[k]).sum();
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
        assert_eq!(
            (w.speaking, w.delegating, w.recovering),
            (Some(3.0), Some(5.0), Some(2.0))
        );
        assert!(w.never_varied.is_empty());
        assert!(cal.knee_score.is_some(), "points above 600 ms exist");
    }

    #[test]
    fn too_few_or_flat_points_say_why_they_were_not_fitted() {
        let few = calibrate(&[p([1.0, 0.0, 0.0, 0.0], 500.0)], 600.0);
        assert!(few.unfitted.unwrap().contains("at least"));
        assert_eq!(few.knee_score, None);
        let flat: Vec<Point> = (0..10).map(|_| p([1.0, 0.0, 0.0, 0.0], 500.0)).collect();
        assert!(
            calibrate(&flat, 600.0)
                .unfitted
                .unwrap()
                .contains("active never varied")
        );
    }

    #[test]
    fn a_component_that_never_varied_is_left_out_and_named() {
        // Active and speaking vary; nobody delegated or recovered.
        let cost = |c: [f64; 4]| 400.0 + 20.0 * c[0] + 60.0 * c[1];
        let pts: Vec<Point> = (0..10)
            .map(|i| {
                let i = f64::from(i);
                let c = [3.0 + i, (i * 3.0) % 4.0, 0.0, 0.0];
                p(c, cost(c))
            })
            .collect();
        let w = calibrate(&pts, 10_000.0).suggested.expect("fitted");
        assert_eq!(
            (w.speaking, w.delegating, w.recovering),
            (Some(3.0), None, None)
        );
        assert_eq!(w.never_varied, ["delegating", "recovering"]);
    }
}
