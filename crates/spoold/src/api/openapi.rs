//! The OpenAPI document, generated from the handlers' annotations and the wire types. A snapshot
//! test keeps `docs/openapi.json` identical to it.

use utoipa::OpenApi;

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
        super::deliveries::cancel,
        super::deliveries::retry,
        super::stats::stats,
        super::targets::targets,
        super::system::healthz,
        super::system::readyz,
        super::system::metrics,
        super::system::openapi,
    ),
    components(schemas(
        spool_proto::CreateDelivery,
        spool_proto::DeliveryView,
        spool_proto::DeliveryList,
        spool_proto::DeliveryStatus,
        spool_proto::AttemptView,
        spool_proto::AttemptList,
        spool_proto::ErrorBody,
        spool_proto::ApiError,
        spool_proto::StatsView,
        spool_proto::ActivityView,
        spool_proto::TargetView,
        spool_proto::TargetList,
        super::system::StatusOk,
    )),
    tags(
        (name = "deliveries", description = "Submit and manage deliveries"),
        (name = "overview", description = "The operator's overview: counts, recent activity, targets"),
        (name = "system", description = "Health, readiness, metrics"),
    )
)]
pub struct ApiDoc;

/// The document as pretty JSON, as committed in `docs/openapi.json`.
pub fn document() -> String {
    ApiDoc::openapi()
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}
