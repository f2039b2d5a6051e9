//! An agentic trace's dependency graph: each request's dependencies resolved to request
//! positions, checked as NVIDIA Dynamo's reader checks them (an edge names a request of the
//! trace, of the same play; no cycle; every play has a root), and the requests put in
//! dependency order (a request after everything it depends on; otherwise file order).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::dependency::{Dependency, RawDependency};
use crate::error::{Fault, TraceError};

/// One request of the graph: its line in the file and its play.
pub(crate) struct Node {
    pub(crate) line: usize,
    pub(crate) play: u64,
}

/// Resolves `raw[i]` (the dependencies of the request `requests[i]`, named by the ids in
/// `ids`) and checks the graph. The answer is the requests in dependency order, each as
/// its position in `requests` with its dependencies on positions in that order.
pub(crate) fn resolve(
    path: &std::path::Path,
    requests: &[Node],
    ids: &[String],
    raw: &[Vec<RawDependency>],
) -> Result<Vec<(usize, Vec<Dependency>)>, TraceError> {
    let error = |index: usize, field: Option<&str>, fault, message| TraceError {
        file: path.to_owned(),
        line: requests_line(requests, index),
        field: field.map(str::to_owned),
        fault,
        message,
    };
    let position: HashMap<&str, usize> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), i))
        .collect();
    let n = requests.len();
    let mut resolved: Vec<Vec<Dependency>> = Vec::with_capacity(n);
    for (index, deps) in raw.iter().enumerate() {
        let mut list = Vec::with_capacity(deps.len());
        for dep in deps {
            let Some(&on) = position.get(dep.request_id.as_str()) else {
                return Err(error(
                    index,
                    Some("dependencies"),
                    Fault::UnknownParent,
                    format!(
                        "depends on `{}`, which no request of the trace is",
                        dep.request_id
                    ),
                ));
            };
            if requests[on].play != requests[index].play {
                return Err(error(
                    index,
                    Some("dependencies"),
                    Fault::InvalidField,
                    format!(
                        "request `{}` depends on `{}` of another play",
                        ids[index], dep.request_id
                    ),
                ));
            }
            list.push(Dependency {
                on,
                trigger: dep.trigger,
                delay_ns: dep.delay_ns,
                relation: dep.relation,
            });
        }
        resolved.push(list);
    }
    // Kahn's algorithm, the earliest line first among those ready.
    let mut remaining: Vec<usize> = resolved.iter().map(Vec::len).collect();
    let mut dependents = vec![Vec::new(); n];
    for (index, deps) in resolved.iter().enumerate() {
        for dep in deps {
            dependents[dep.on].push(index);
        }
    }
    let mut ready: BinaryHeap<Reverse<usize>> =
        (0..n).filter(|i| remaining[*i] == 0).map(Reverse).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(Reverse(index)) = ready.pop() {
        order.push(index);
        for &next in &dependents[index] {
            remaining[next] -= 1;
            if remaining[next] == 0 {
                ready.push(Reverse(next));
            }
        }
    }
    if order.len() < n {
        let blocked: Vec<usize> = (0..n).filter(|i| remaining[*i] > 0).collect();
        let named: Vec<String> = blocked
            .iter()
            .take(8)
            .map(|i| format!("`{}` (line {})", ids[*i], requests[*i].line))
            .collect();
        return Err(error(
            blocked[0],
            Some("dependencies"),
            Fault::InvalidField,
            format!(
                "a dependency cycle among {} requests: {}{}",
                blocked.len(),
                named.join(", "),
                if blocked.len() > 8 { ", ..." } else { "" }
            ),
        ));
    }
    // Every play has a root (a play on a cycle has none, and was refused above).
    let mut new_position = vec![0; n];
    for (new, &old) in order.iter().enumerate() {
        new_position[old] = new;
    }
    Ok(order
        .iter()
        .map(|&old| {
            let dependencies = resolved[old]
                .iter()
                .map(|dep| Dependency {
                    on: new_position[dep.on],
                    ..*dep
                })
                .collect();
            (old, dependencies)
        })
        .collect())
}

fn requests_line(requests: &[Node], index: usize) -> usize {
    requests.get(index).map_or(0, |r| r.line)
}
