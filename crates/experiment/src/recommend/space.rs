//! A search space: experiment settings in which some values are ranges or choices.
//!
//! A value written as a one-key mapping `{int: [LO, HI]}` (inclusive), `{float: [LO, HI]}`
//! or `{choice: [A, B, ...]}` is a parameter; anything else is taken as written. Choices
//! may hold parameters of their own (a policy's knobs), which exist only while that
//! alternative is chosen. Parameters are numbered in the order the file gives them, which
//! is also the order a sampler draws them in.

use serde_yaml::{Mapping, Value};

/// The most parameters a space may have.
pub const MAX_PARAMS: usize = 64;

/// What a parameter ranges over.
#[derive(Debug, Clone, PartialEq)]
pub enum Domain {
    /// Integers from the first to the second, both included.
    Int(i64, i64),
    /// Numbers from the first to the second.
    Float(f64, f64),
    /// One of so many alternatives.
    Choice(usize),
}

/// One parameter of the space.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    /// Where it is: `endpoints`, `policy`, `policy/1.matcher_config.overlap_score_weight`.
    pub path: String,
    /// What it ranges over.
    pub domain: Domain,
    /// The alternatives it needs chosen, as (parameter, alternative): all must hold.
    pub needs: Vec<(usize, usize)>,
}

/// One value drawn for a parameter.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pick {
    /// For [`Domain::Int`].
    Int(i64),
    /// For [`Domain::Float`].
    Float(f64),
    /// For [`Domain::Choice`]: the alternative's index.
    Choice(usize),
}

/// The parameters of a space and the tree they sit in.
#[derive(Debug, Clone)]
pub struct Space {
    tree: Mapping,
    /// In file order.
    pub params: Vec<Param>,
    /// The alternatives of each choice parameter, by parameter index.
    choices: Vec<Vec<Value>>,
}

impl Space {
    /// Reads the `search` mapping.
    pub fn new(tree: Mapping) -> Result<Space, String> {
        let mut space = Space {
            tree: Mapping::new(),
            params: Vec::new(),
            choices: Vec::new(),
        };
        for (key, value) in &tree {
            let Value::String(key) = key else {
                return Err("`search` keys are setting names".into());
            };
            space.walk(key, value, &[])?;
        }
        if space.params.is_empty() {
            return Err(
                "`search` has no range or choice: give one, e.g. `endpoints: {int: [1, 8]}`".into(),
            );
        }
        space.tree = tree;
        Ok(space)
    }

    /// Every parameter under `value`, found at `path`, needing `needs`.
    fn walk(&mut self, path: &str, value: &Value, needs: &[(usize, usize)]) -> Result<(), String> {
        if let Some(domain) = spec(path, value)? {
            if self.params.len() == MAX_PARAMS {
                return Err(format!("more than {MAX_PARAMS} ranges and choices"));
            }
            let index = self.params.len();
            let alternatives = match (&domain, value) {
                (Domain::Choice(_), Value::Mapping(m)) => match m.get("choice") {
                    Some(Value::Sequence(items)) => items.clone(),
                    _ => Vec::new(),
                },
                _ => Vec::new(),
            };
            self.params.push(Param {
                path: path.to_owned(),
                domain,
                needs: needs.to_vec(),
            });
            self.choices.push(alternatives.clone());
            for (n, alternative) in alternatives.iter().enumerate() {
                let mut inner = needs.to_vec();
                inner.push((index, n));
                self.walk(&format!("{path}/{n}"), alternative, &inner)?;
            }
            return Ok(());
        }
        match value {
            Value::Mapping(map) => {
                for (key, inner) in map {
                    let key = key.as_str().unwrap_or("?");
                    self.walk(&format!("{path}.{key}"), inner, needs)?;
                }
            }
            Value::Sequence(items) => {
                for (n, inner) in items.iter().enumerate() {
                    self.walk(&format!("{path}[{n}]"), inner, needs)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Whether parameter `index` exists under the picks made so far.
    pub fn active(&self, index: usize, picks: &[Option<Pick>]) -> bool {
        self.params[index]
            .needs
            .iter()
            .all(|&(p, alt)| picks.get(p) == Some(&Some(Pick::Choice(alt))))
    }

    /// The settings `picks` give (one per parameter, `None` for inactive ones): the
    /// `search` mapping with every parameter replaced by its value.
    pub fn settings(&self, picks: &[Option<Pick>]) -> Mapping {
        let mut next = 0;
        let mut out = Mapping::new();
        for (key, value) in &self.tree {
            out.insert(key.clone(), self.fill(value, picks, &mut next));
        }
        out
    }

    fn fill(&self, value: &Value, picks: &[Option<Pick>], next: &mut usize) -> Value {
        // The walk in `new` met parameters in this same order.
        if let Ok(Some(_)) = spec("", value) {
            let index = *next;
            *next += 1;
            let choices = &self.choices[index];
            return match picks.get(index).copied().flatten() {
                Some(Pick::Int(i)) => Value::Number(i.into()),
                Some(Pick::Float(x)) => Value::Number(x.into()),
                Some(Pick::Choice(chosen)) => {
                    let mut out = Value::Null;
                    for (n, alternative) in choices.iter().enumerate() {
                        // Skipping an alternative still numbers the parameters inside it.
                        let filled = self.fill(alternative, picks, next);
                        if n == chosen {
                            out = filled;
                        }
                    }
                    out
                }
                None => {
                    for alternative in choices {
                        self.fill(alternative, picks, next);
                    }
                    Value::Null
                }
            };
        }
        match value {
            Value::Mapping(map) => Value::Mapping(
                map.iter()
                    .map(|(k, v)| (k.clone(), self.fill(v, picks, next)))
                    .collect(),
            ),
            Value::Sequence(items) => {
                Value::Sequence(items.iter().map(|v| self.fill(v, picks, next)).collect())
            }
            other => other.clone(),
        }
    }

    /// Every point of the space, in order (the last parameter turning fastest), when it
    /// has at most `limit` (`None` when a number range makes it continuous or it is larger).
    pub fn points(&self, limit: u64) -> Option<Vec<Vec<Option<Pick>>>> {
        if self.size()? > limit {
            return None;
        }
        let mut points = vec![Vec::new()];
        for (index, param) in self.params.iter().enumerate() {
            let mut next = Vec::new();
            for picks in points {
                if !self.active(index, &picks) {
                    let mut p = picks;
                    p.push(None);
                    next.push(p);
                    continue;
                }
                let values: Vec<Pick> = match param.domain {
                    Domain::Int(lo, hi) => (lo..=hi).map(Pick::Int).collect(),
                    Domain::Choice(n) => (0..n).map(Pick::Choice).collect(),
                    Domain::Float(..) => return None,
                };
                for value in values {
                    let mut p = picks.clone();
                    p.push(Some(value));
                    next.push(p);
                }
            }
            points = next;
        }
        Some(points)
    }

    /// How many points the space has when every parameter is a choice or an integer
    /// range (`None` when a number range makes it continuous, or past `u64`).
    pub fn size(&self) -> Option<u64> {
        fn count(space: &Space, needs: &[(usize, usize)]) -> Option<u64> {
            let mut total: u64 = 1;
            for (index, param) in space.params.iter().enumerate() {
                if param.needs != needs {
                    continue;
                }
                let here = match param.domain {
                    Domain::Int(lo, hi) => u64::try_from(hi - lo).ok()?.checked_add(1)?,
                    Domain::Float(..) => return None,
                    Domain::Choice(n) => {
                        let mut sum: u64 = 0;
                        for alt in 0..n {
                            let mut inner = needs.to_vec();
                            inner.push((index, alt));
                            sum = sum.checked_add(count(space, &inner)?)?;
                        }
                        sum
                    }
                };
                total = total.checked_mul(here)?;
            }
            Some(total)
        }
        count(self, &[])
    }
}

/// The domain `value` declares, if it is a parameter; an error if it tries to and fails.
fn spec(path: &str, value: &Value) -> Result<Option<Domain>, String> {
    let Value::Mapping(map) = value else {
        return Ok(None);
    };
    if map.len() != 1 {
        return Ok(None);
    }
    let (key, body) = map.iter().next().expect("one entry");
    let bad = |what: &str| Err(format!("search `{path}`: {what}"));
    match key.as_str() {
        Some("int") => match body.as_sequence().map(Vec::as_slice) {
            Some([lo, hi]) => match (lo.as_i64(), hi.as_i64()) {
                (Some(lo), Some(hi)) if lo <= hi => Ok(Some(Domain::Int(lo, hi))),
                _ => bad("`int` takes [LO, HI], integers with LO <= HI"),
            },
            _ => bad("`int` takes [LO, HI]"),
        },
        Some("float") => match body.as_sequence().map(Vec::as_slice) {
            Some([lo, hi]) => match (lo.as_f64(), hi.as_f64()) {
                (Some(lo), Some(hi)) if lo.is_finite() && hi.is_finite() && lo < hi => {
                    Ok(Some(Domain::Float(lo, hi)))
                }
                _ => bad("`float` takes [LO, HI], finite numbers with LO < HI"),
            },
            _ => bad("`float` takes [LO, HI]"),
        },
        Some("choice") => match body.as_sequence() {
            Some(items) if !items.is_empty() && items.len() <= 1000 => {
                Ok(Some(Domain::Choice(items.len())))
            }
            _ => bad("`choice` takes a list of 1 to 1,000 values"),
        },
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space(text: &str) -> Space {
        Space::new(serde_yaml::from_str(text).unwrap()).unwrap()
    }

    #[test]
    fn nested_choices_number_their_knobs_and_fill_only_the_chosen_one() {
        let s = space(
            "endpoints: {int: [1, 4]}\n\
             policy: {choice: [round-robin, {matcher: dynamo-kv, matcher_config: {overlap_score_weight: {float: [0, 2]}}}]}\n\
             engine: {max_num_seqs: {choice: [64, 256]}}\n",
        );
        let paths: Vec<&str> = s.params.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "endpoints",
                "policy",
                "policy/1.matcher_config.overlap_score_weight",
                "engine.max_num_seqs"
            ]
        );
        assert_eq!(s.params[2].needs, [(1, 1)]);
        let kv = [
            Some(Pick::Int(3)),
            Some(Pick::Choice(1)),
            Some(Pick::Float(0.5)),
            Some(Pick::Choice(0)),
        ];
        assert!(s.active(2, &kv));
        let text = serde_yaml::to_string(&s.settings(&kv)).unwrap();
        assert_eq!(
            text,
            "endpoints: 3\npolicy:\n  matcher: dynamo-kv\n  matcher_config:\n    overlap_score_weight: 0.5\nengine:\n  max_num_seqs: 64\n"
        );
        let rr = [
            Some(Pick::Int(1)),
            Some(Pick::Choice(0)),
            None,
            Some(Pick::Choice(1)),
        ];
        assert!(!s.active(2, &rr));
        let text = serde_yaml::to_string(&s.settings(&rr)).unwrap();
        assert_eq!(
            text,
            "endpoints: 1\npolicy: round-robin\nengine:\n  max_num_seqs: 256\n"
        );
        assert_eq!(s.size(), None);
        let grid =
            space("endpoints: {int: [1, 4]}\npolicy: {choice: [a, {m: {choice: [1, 2, 3]}}]}");
        assert_eq!(grid.size(), Some(4 * (1 + 3)));
        let points = grid.points(100).unwrap();
        assert_eq!(points.len(), 16);
        assert_eq!(points[0], [Some(Pick::Int(1)), Some(Pick::Choice(0)), None]);
        assert_eq!(
            points[3],
            [
                Some(Pick::Int(1)),
                Some(Pick::Choice(1)),
                Some(Pick::Choice(2))
            ]
        );
        assert!(grid.points(15).is_none() && s.points(1000).is_none());
    }

    #[test]
    fn malformed_ranges_are_named() {
        let err = |t: &str| Space::new(serde_yaml::from_str(t).unwrap()).unwrap_err();
        assert_eq!(
            err("endpoints: {int: [4, 1]}"),
            "search `endpoints`: `int` takes [LO, HI], integers with LO <= HI"
        );
        assert_eq!(
            err("policy: {choice: []}"),
            "search `policy`: `choice` takes a list of 1 to 1,000 values"
        );
        assert!(err("endpoints: 4").contains("no range or choice"));
    }
}
