//! Layer 3 of normalisation: decorated tool names resolve to the offered tool.

use super::{Change, Sanitized};
use std::collections::BTreeSet;

/// Layer 3. Resolves each call's name to an offered tool when it is not one already: surrounding
/// whitespace, quotes or backticks, a `functions.` prefix and a trailing `()` are removed, then a
/// unique case-insensitive match is accepted. A name that resolves to nothing stays as it is (the
/// runner answers it with an "unknown tool" result).
pub fn trim_tool_names(calls: &mut [Sanitized], offered: &BTreeSet<String>) -> Vec<Change> {
    let mut changes = Vec::new();
    for Sanitized { call, .. } in calls {
        if let Some(resolved) = resolve_tool_name(&call.name, offered)
            && resolved != call.name
        {
            changes.push(Change::TrimmedName {
                id: call.id.clone(),
                from: std::mem::replace(&mut call.name, resolved.to_owned()),
                to: resolved.to_owned(),
            });
        }
    }
    changes
}

pub(super) fn resolve_tool_name<'a>(raw: &str, offered: &'a BTreeSet<String>) -> Option<&'a str> {
    if let Some(exact) = offered.get(raw) {
        return Some(exact);
    }
    let mut name = raw;
    loop {
        let before = name;
        name = name.trim();
        for quote in ['"', '\'', '`'] {
            if name.len() >= 2 && name.starts_with(quote) && name.ends_with(quote) {
                name = &name[1..name.len() - 1];
            }
        }
        name = name.strip_prefix("functions.").unwrap_or(name);
        name = name.strip_suffix("()").unwrap_or(name);
        if name == before {
            break;
        }
    }
    if let Some(found) = offered.get(name) {
        return Some(found);
    }
    let mut folded = offered.iter().filter(|o| o.eq_ignore_ascii_case(name));
    match (folded.next(), folded.next()) {
        (Some(only), None) => Some(only),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::super::fixtures::{call, offered};
    use super::*;

    #[test]
    fn trim_resolves_decorated_names_to_offered_tools() {
        // (name in, name out)
        let rows = [
            ("current_time", "current_time"),
            (" current_time \n", "current_time"),
            ("\"current_time\"", "current_time"),
            ("'web_search'", "web_search"),
            ("functions.current_time", "current_time"),
            ("current_time()", "current_time"),
            ("`functions.current_time()`", "current_time"),
            ("\" functions.web_search() \"", "web_search"),
            ("Current_Time", "current_time"),
            ("Lookup", "Lookup"),
            ("lookup", "lookup"),
            // unknown or ambiguous names stay as they are
            ("LOOKUP", "LOOKUP"),
            ("delete_everything", "delete_everything"),
            ("functions.delete_everything", "functions.delete_everything"),
            ("current_time_v2", "current_time_v2"),
            ("\"current_time", "\"current_time"),
        ];
        for (input, output) in rows {
            let mut calls = vec![Sanitized::valid(call("c", input, "{}"))];
            let changes = trim_tool_names(&mut calls, &offered());
            assert_eq!(calls[0].call.name, output, "{input:?}");
            let expected: Vec<Change> = (input != output)
                .then(|| Change::TrimmedName {
                    id: "c".into(),
                    from: input.into(),
                    to: output.into(),
                })
                .into_iter()
                .collect();
            assert_eq!(changes, expected, "{input:?}");
        }
    }

    #[test]
    fn trim_keeps_a_calls_problem() {
        let mut calls = vec![Sanitized {
            call: call("c", "functions.current_time", "{x"),
            problem: Some("invalid JSON arguments: x".into()),
        }];
        trim_tool_names(&mut calls, &offered());
        assert_eq!(calls[0].call.name, "current_time");
        assert_eq!(
            calls[0].problem.as_deref(),
            Some("invalid JSON arguments: x")
        );
    }
}
