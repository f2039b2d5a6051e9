//! The addresses `serve` is given: an engine's `host:port`, and which engines' KV events
//! come from which sockets (`ENDPOINT=URL` lists).

use crate::serve::kv_index::KvSubscription;

/// Which list an address was in: the engines' event sockets, or their replay sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listed {
    /// Where an engine publishes its KV events.
    Events,
    /// Where an engine answers for the events a subscriber missed.
    Replays,
}

/// What is wrong with an `ENDPOINT=URL` list, and which list it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ListError {
    /// The list.
    pub list: Listed,
    /// What is wrong, naming the item.
    pub message: String,
}

/// `ENDPOINT=URL` pairs of `events` and `replays` (comma-separated), each endpoint one of
/// `fleet`, at most once in a list, every replay one of an engine whose events are
/// followed.
pub fn subscriptions(
    events: &str,
    replays: &str,
    fleet: &[String],
) -> Result<Vec<KvSubscription>, ListError> {
    let pairs = |list: Listed, text: &str| -> Result<Vec<(String, String)>, ListError> {
        let fail = |message: String| ListError { list, message };
        let mut out: Vec<(String, String)> = Vec::new();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((name, url)) = item.split_once('=') else {
                return Err(fail(format!("`{item}` is not ENDPOINT=ZMQ_URL")));
            };
            let name = endpoint(name.trim()).map_err(|why| fail(format!("`{item}`: {why}")))?;
            if !fleet.contains(&name) {
                return Err(fail(format!(
                    "`{name}` is not one of the endpoints ({})",
                    fleet.join(",")
                )));
            }
            if out.iter().any(|(n, _)| *n == name) {
                return Err(fail(format!("`{name}` is given twice")));
            }
            out.push((name, url.trim().to_owned()));
        }
        Ok(out)
    };
    let events = pairs(Listed::Events, events)?;
    let replays = pairs(Listed::Replays, replays)?;
    if let Some((name, _)) = replays
        .iter()
        .find(|(n, _)| !events.iter().any(|(e, _)| e == n))
    {
        return Err(ListError {
            list: Listed::Replays,
            message: format!("`{name}` has a replay socket but no events socket"),
        });
    }
    Ok(events
        .into_iter()
        .map(|(endpoint, url)| {
            let replay = replays
                .iter()
                .find(|(n, _)| *n == endpoint)
                .map(|(_, r)| r.clone());
            KvSubscription {
                endpoint,
                url,
                replay,
            }
        })
        .collect())
}

/// One engine's `host:port` (an optional `http://` and trailing `/` dropped), or why it
/// is none the router could ever reach: another scheme, a path, query, fragment or user,
/// spaces, a host that is no name or address, port 0.
pub fn endpoint(item: &str) -> Result<String, String> {
    if let Some((scheme, _)) = item.split_once("://")
        && scheme != "http"
    {
        return Err(format!(
            "only plain http:// engines can be served, not {scheme}://"
        ));
    }
    let rest = item.strip_prefix("http://").unwrap_or(item);
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains(['/', '?', '#', '@']) || rest.chars().any(char::is_whitespace) {
        return Err("is not host:port (no path, query, fragment, user or spaces)".into());
    }
    let Some((host, port)) = rest.rsplit_once(':') else {
        return Err("is not host:port".into());
    };
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        }
    };
    if !host_ok {
        return Err(format!("`{host}` is not a host name or address"));
    }
    match port.parse::<u16>() {
        Ok(0) => Err("port 0 is no engine's port".into()),
        Ok(_) => Ok(rest.to_owned()),
        Err(_) => Err(format!("`{port}` is not a port (1 to 65535)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_engine_is_host_colon_port_and_nothing_else() {
        assert_eq!(endpoint("http://a.b-c_d:80/").unwrap(), "a.b-c_d:80");
        assert_eq!(endpoint("[::1]:8000").unwrap(), "[::1]:8000");
        for (bad, why) in [
            ("https://a:1", "only plain http://"),
            ("a:1/v1", "no path"),
            ("u@a:1", "no path"),
            ("a b:1", "no path"),
            ("a", "is not host:port"),
            ("[zz]:1", "not a host name"),
            ("a:0", "port 0"),
            ("a:65536", "not a port"),
        ] {
            let e = endpoint(bad).expect_err(bad);
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn a_list_names_its_list_and_item() {
        let fleet = ["a:1".to_owned(), "b:2".to_owned()];
        let got = subscriptions("a:1=tcp://x:1, b:2=tcp://x:2", "b:2=tcp://x:3", &fleet).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].replay.as_deref(), Some("tcp://x:3"));
        assert_eq!(got[0].replay, None);
        let fail =
            |events: &str, replays: &str| subscriptions(events, replays, &fleet).unwrap_err();
        let e = fail("c:3=tcp://x:1", "");
        assert_eq!(e.list, Listed::Events);
        assert!(
            e.message
                .contains("`c:3` is not one of the endpoints (a:1,b:2)"),
            "{e}"
        );
        assert!(fail("a:1=u,a:1=v", "").message.contains("given twice"));
        assert!(fail("a:1", "").message.contains("is not ENDPOINT=ZMQ_URL"));
        let e = fail("a:1=u", "b:2=v");
        assert_eq!(e.list, Listed::Replays);
        assert!(e.message.contains("`b:2` has a replay socket"), "{e}");
    }
}
