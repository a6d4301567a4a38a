//! The OpenAPI document. The daemon serves `docs/openapi.json` as committed, built into the
//! binary ([`DOCUMENT`]): the document is generated ([`value`]) from the handlers' annotations
//! and the wire types, plus the few rules the annotations cannot say (the names a header may
//! have, `body` and `bodyBase64` not together), and a snapshot test keeps the committed file
//! identical to it. Served that way, the generator is not reachable from the daemon and is left
//! out of its optimised build (0.9 MB of code and data). `scripts/api-fuzz` holds the daemon to
//! the document.

use std::sync::OnceLock;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use utoipa::OpenApi;

/// The document served at `/v1/openapi.json`: `docs/openapi.json` as committed.
pub const DOCUMENT: &str = include_str!("../../../../docs/openapi.json");

#[utoipa::path(get, path = "/v1/openapi.json", tag = "system",
    responses((status = 200, description = "This document")))]
pub async fn openapi() -> Response {
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        DOCUMENT,
    )
        .into_response()
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "spoold",
        description = "Durable outbound HTTP spool. Every error is `{\"error\":{\"code\",\"message\"}}` with a stable code.",
        license(name = "MIT"),
    ),
    paths(
        super::deliveries::create,
        super::deliveries::list,
        super::deliveries::get,
        super::deliveries::attempts,
        super::deliveries::transitions,
        super::deliveries::checks,
        super::deliveries::resolve,
        super::deliveries::cancel,
        super::deliveries::retry,
        super::deliveries::bulk,
        super::transfer::export,
        super::transfer::import,
        super::tasks::submit,
        super::tasks::list,
        super::tasks::get,
        super::tasks::attempts,
        super::tasks::transitions,
        super::tasks::cancel,
        super::tasks::retry,
        super::tasks::bulk,
        super::tasks::resolve,
        super::tasks::types,
        super::steps::report,
        super::steps::list,
        super::task_output::output,
        super::locks::list,
        super::stats::stats,
        super::targets::targets,
        super::targets::pause,
        super::targets::resume,
        super::maildrop::maildrop,
        super::system::healthz,
        super::system::readyz,
        super::system::metrics,
        openapi,
    ),
    components(schemas(
        spool_proto::CreateDelivery,
        spool_proto::DeliveryView,
        spool_proto::DeliveryList,
        spool_proto::DeliveryStatus,
        spool_proto::AttemptView,
        spool_proto::AttemptList,
        spool_proto::TransitionView,
        spool_proto::TransitionList,
        spool_proto::DeliveryMode,
        spool_proto::Reconcile,
        spool_proto::Sign,
        spool_proto::BulkRequest,
        spool_proto::BulkAction,
        spool_proto::DeliveryFilter,
        spool_proto::BulkResult,
        spool_proto::transfer::ExportRecord,
        spool_proto::transfer::BodyKind,
        spool_proto::transfer::ExportedDelivery,
        spool_proto::transfer::ExportedAttempt,
        spool_proto::transfer::ExportedTransition,
        spool_proto::transfer::ExportedCheck,
        spool_proto::transfer::ExportPage,
        spool_proto::transfer::ImportRequest,
        spool_proto::transfer::ImportOutcome,
        spool_proto::transfer::ImportResult,
        spool_proto::transfer::ImportResults,
        spool_proto::TaskBulkRequest,
        spool_proto::TaskFilter,
        spool_proto::ResolveRequest,
        spool_proto::ResolveOutcome,
        spool_proto::ResolveTask,
        spool_proto::ListOrder,
        spool_proto::TaskResolveOutcome,
        spool_proto::CheckView,
        spool_proto::CheckList,
        spool_proto::SubmitTask,
        spool_proto::TaskView,
        spool_proto::TaskList,
        spool_proto::TaskStatus,
        spool_proto::TaskAttemptView,
        spool_proto::TaskAttemptList,
        spool_proto::TaskTransitionView,
        spool_proto::TaskTransitionList,
        spool_proto::TaskParamView,
        spool_proto::TaskTypeView,
        spool_proto::TaskTypeList,
        spool_proto::ReportStep,
        spool_proto::TaskStepView,
        spool_proto::TaskStepList,
        spool_proto::TargetPause,
        spool_proto::LockView,
        spool_proto::LockList,
        spool_proto::ErrorBody,
        spool_proto::ApiError,
        spool_proto::StatsView,
        spool_proto::ActivityView,
        spool_proto::TargetView,
        spool_proto::GoneUrlView,
        spool_proto::maildrop::MaildropView,
        spool_proto::maildrop::RefusedDrop,
        spool_proto::TargetList,
        super::system::StatusOk,
        super::system::Ready,
    )),
    tags(
        (name = "deliveries", description = "Submit and manage deliveries"),
        (name = "tasks", description = "Run declared commands as durable tasks"),
        (name = "overview", description = "The operator's overview: counts, recent activity, targets"),
        (name = "system", description = "Health, readiness, metrics"),
    )
)]
pub struct ApiDoc;

/// The document as generated, built once.
pub fn value() -> &'static Value {
    static GENERATED: OnceLock<Value> = OnceLock::new();
    GENERATED.get_or_init(|| {
        let mut doc = serde_json::to_value(ApiDoc::openapi())
            .unwrap_or_else(|e| json!({"error": e.to_string()}));
        add_rules(&mut doc);
        doc
    })
}

/// The generated document as pretty JSON, as `docs/openapi.json` is committed.
pub fn document() -> String {
    serde_json::to_string_pretty(value()).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// Header names a create may use: a token, optionally padded with spaces (trimmed), and not one
/// of the names spoold manages itself (any case).
const HEADER_NAME: &str = r"^ *[!#$%&'*+.^_`|~0-9A-Za-z-]+ *$";
/// A string that is not blank: it holds a character outside Unicode's White_Space, which the
/// daemon trims (ECMAScript's `\S` differs: it counts U+0085 as a character, U+FEFF as space).
/// The wire types' `note` fields say the same in their own attributes.
const NOT_BLANK: &str = r"[^\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]";

/// Header values: no control characters but tab.
const HEADER_VALUE: &str = r"^[^\u0000-\u0008\u000a-\u001f\u007f]*$";

/// Header names a request may carry (`managed`: the names spoold sets itself, as patterns).
fn headers_names(managed: &[String]) -> Value {
    json!({
        "type": "string",
        "pattern": HEADER_NAME,
        "not": {"pattern": format!("^ *({}) *$", managed.join("|"))},
    })
}

fn header_values() -> Value {
    json!({"type": ["string", "null"], "pattern": HEADER_VALUE})
}

fn add_rules(doc: &mut Value) {
    // A bulk action's filter names at least one field (utoipa has no attribute that says so).
    for filter in ["DeliveryFilter", "TaskFilter"] {
        doc["components"]["schemas"][filter]["minProperties"] = json!(1);
    }
    let create = &mut doc["components"]["schemas"]["CreateDelivery"];
    create["properties"]["targetUrl"]["format"] = json!("uri");
    let managed: Vec<String> = spool_proto::MANAGED_HEADERS
        .iter()
        .map(|name| {
            name.chars()
                .map(|c| {
                    if c.is_ascii_alphabetic() {
                        format!("[{}{}]", c.to_ascii_uppercase(), c.to_ascii_lowercase())
                    } else {
                        c.to_string()
                    }
                })
                .collect()
        })
        .collect();
    let headers = &mut create["properties"]["headers"];
    headers["propertyNames"] = headers_names(&managed);
    headers["additionalProperties"] = header_values();
    create["not"] = json!({
        "description": "`body` and `bodyBase64` are not given together",
        "required": ["body", "bodyBase64"],
    });
    let at_most_once = json!({
        "required": ["mode"],
        "properties": {"mode": {"const": "at_most_once"}},
    });
    create["allOf"] = json!([
        {
            "description": "`reconcile` needs `mode` `at_most_once`",
            "if": {"required": ["reconcile"], "properties": {"reconcile": {"type": "object"}}},
            "then": at_most_once,
        },
        {
            "description": "a `fingerprint` (not blank) needs `mode` `at_most_once`",
            "if": {
                "required": ["fingerprint"],
                "properties": {"fingerprint": {"type": "string", "pattern": NOT_BLANK}},
            },
            "then": at_most_once,
        },
    ]);
    let reconcile_headers = &mut doc["components"]["schemas"]["Reconcile"]["properties"]["headers"];
    reconcile_headers["propertyNames"] = headers_names(&managed);
    reconcile_headers["additionalProperties"] = header_values();
    doc["components"]["schemas"]["ResolveRequest"]["allOf"] = json!([{
        "description": "`remoteId` (not blank) goes only with `outcome` `succeeded`",
        "if": {
            "required": ["remoteId"],
            "properties": {"remoteId": {"type": "string", "pattern": NOT_BLANK}},
        },
        "then": {"properties": {"outcome": {"const": "succeeded"}}},
    }]);
    // An empty query parameter is the same as an absent one (as in spoold v0.1.0).
    if let Some(paths) = doc["paths"].as_object_mut() {
        for operation in paths.values_mut().filter_map(Value::as_object_mut) {
            for params in operation
                .values_mut()
                .filter_map(|op| op.get_mut("parameters").and_then(Value::as_array_mut))
            {
                for param in params.iter_mut().filter(|p| p["in"] == "query") {
                    let schema = param["schema"].take();
                    param["schema"] =
                        json!({"anyOf": [schema, {"type": "string", "maxLength": 0}]});
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// An operation's `responses(…)` name each status once: utoipa keeps one entry per status
    /// and silently drops the others, so a second line for a status is never documented.
    #[test]
    fn each_operation_names_a_status_once() {
        let sources = [
            ("deliveries.rs", include_str!("deliveries.rs")),
            ("locks.rs", include_str!("locks.rs")),
            ("stats.rs", include_str!("stats.rs")),
            ("steps.rs", include_str!("steps.rs")),
            ("system.rs", include_str!("system.rs")),
            ("targets.rs", include_str!("targets.rs")),
            ("task_output.rs", include_str!("task_output.rs")),
            ("tasks.rs", include_str!("tasks.rs")),
            ("transfer.rs", include_str!("transfer.rs")),
        ];
        let mut operations = 0;
        for (file, source) in sources {
            for block in source.split("#[utoipa::path(").skip(1) {
                let block = &block[..block.find("\n)]").unwrap_or(block.len())];
                let head = block.trim_start().lines().next().unwrap_or_default();
                let mut seen = std::collections::BTreeSet::new();
                for status in block.split("(status = ").skip(1) {
                    let status: String = status.chars().take_while(char::is_ascii_digit).collect();
                    assert!(
                        seen.insert(status.clone()),
                        "{file}, {head}: status {status} is listed twice (say both in one line)"
                    );
                }
                operations += 1;
            }
        }
        assert!(operations > 30, "only {operations} operations found");
    }
}
