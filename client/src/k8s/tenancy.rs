//! The server-side half of tenancy: the ValidatingAdmissionPolicy that confines what the agent
//! writes as a cluster's identity ([`crate::k8s::identity`]), installed by `capstan install`.
//!
//! Validation (`capstan_layout::tenancy`) explains a refused change in the pull request with a
//! file and a line; this policy holds the same boundary on the API server, so a gap in
//! validation, a bug in the agent or a change that races it cannot carry a workload directory's
//! objects past its cluster. It applies to the writes of [`WORKLOAD_USER`] and
//! [`MANAGEMENT_USER`] only (nothing else the agent or anyone does), and admits:
//!
//! - from either, only objects labelled `capstan.dev/cluster` for the cluster of the request's
//!   identity ([`CLUSTER_EXTRA`]); an update or delete only of an object already labelled for it,
//!   or (update) one an admin marked for adoption with [`ADOPT_ANNOTATION`]`: <cluster>`, or one
//!   the agent vouches for by UID ([`OWNS_EXTRA`]): an object of the cluster's record whose
//!   cluster label someone changed, put back as drift. The
//!   one exception is the management identity's fleet-wide objects, the EKS Anywhere releases:
//!   they carry capstan's label and no cluster's (the same for every management cluster that
//!   uses them), and stay so; and a namespace the agent created itself (labelled
//!   `app.kubernetes.io/created-by: capstan`) a management directory then declares. An object
//!   somebody else created is never taken over by accident:
//!   the denial starts with `AlreadyExists:`, which the agent reports as a conflict;
//! - from [`WORKLOAD_USER`] besides: names `<cluster>` or `<cluster>-…`, namespaced objects
//!   outside the reserved namespaces (but CAPV's two cluster-scoped failure-domain kinds), only
//!   the kinds and versions of the reference table (`capstan_layout::tenancy::table`), and every
//!   row of that table holding: each field that names another object (a selector, a Secret, a
//!   template, an owner, a cluster) names the cluster's own, no Secret a controller fills in, EKS
//!   Anywhere's objects paused — the rules are generated from the table validation reads
//!   ([`rules`]); and no Secret or ConfigMap named as controllers name another cluster's
//!   (`capstan_layout::tenancy::reserved`).
//!
//! Which kinds each identity may write is RBAC's part (the agent's `install::rbac`). Every denial's message
//! starts with a reason word ([`Reason`]: `AlreadyExists`, `OutsideCluster`, ...) the agent reads
//! back.

mod rules;

use serde_json::{Value, json};

use crate::k8s::identity::{CLUSTER_EXTRA, MANAGEMENT_USER, OWNS_EXTRA, POLICY, WORKLOAD_USER};
use capstan_layout::tenancy::{
    RESERVED_NAMESPACES, RESERVED_PREFIX, RESERVED_SUFFIX, SHARED_NAMESPACE,
};
use capstan_plan::status::Reason;
use capstan_templates::identity::{
    ADOPT_ANNOTATION, CLUSTER_LABEL, CREATED_BY_LABEL, MANAGED_BY, MANAGED_BY_LABEL,
};

/// One validation: `expr` must hold; else `reason: message` (a CEL string expression), refused
/// as Forbidden (the API server's status reason, not capstan's).
fn rule(expr: &str, reason: Reason, message: &str) -> Value {
    json!({
        "expression": expr,
        "messageExpression": format!("'{reason}: ' + variables.subject + ' ' + {message}"),
        "reason": "Forbidden",
    })
}

/// CEL: whether the request is for a cluster-scoped kind a provider renders (the only
/// cluster-scoped objects a workload directory may write), from the providers' descriptors.
fn cluster_scoped_kinds() -> String {
    let kinds: Vec<String> = capstan_templates::provider::cluster_scoped()
        .map(|k| {
            format!(
                "(request.resource.group == '{}' && request.resource.resource == '{}')",
                k.group, k.plural
            )
        })
        .collect();
    if kinds.is_empty() {
        "false".into()
    } else {
        format!("({})", kinds.join(" || "))
    }
}

/// The policy.
pub fn policy() -> Value {
    let cluster_label = CLUSTER_LABEL;
    let (managed_by_label, managed_by) = (MANAGED_BY_LABEL, MANAGED_BY);
    let created_by_label = CREATED_BY_LABEL;
    let adopt = ADOPT_ANNOTATION;
    let mut validations = vec![
        rule(
            "variables.cluster != ''",
            Reason::NoCluster,
            "'is written without the capstan.dev/cluster extra naming one cluster'",
        ),
        rule(
            &format!(
                "request.operation == 'DELETE' || variables.labels[?'{cluster_label}'].orValue('') == variables.cluster || (!variables.tenant && !('{cluster_label}' in variables.labels) && !('{cluster_label}' in variables.oldLabels))"
            ),
            Reason::Unlabelled,
            &format!("'must carry the label {cluster_label}: ' + variables.cluster"),
        ),
        rule(
            &format!(
                "request.operation == 'CREATE' || variables.oldLabels[?'{cluster_label}'].orValue('') == variables.cluster || (request.operation == 'UPDATE' && (variables.oldAnnotations[?'{adopt}'].orValue('') == variables.cluster || (has(request.userInfo.extra) && '{OWNS_EXTRA}' in request.userInfo.extra && oldObject.metadata.uid in request.userInfo.extra['{OWNS_EXTRA}']) || (!variables.tenant && variables.oldLabels[?'{managed_by_label}'].orValue('') == '{managed_by}' && !('{cluster_label}' in variables.oldLabels) && !('{cluster_label}' in variables.labels)) || (!variables.tenant && variables.oldLabels[?'{created_by_label}'].orValue('') == '{managed_by}')))"
            ),
            Reason::AlreadyExists,
            &format!(
                "'exists and is not cluster ' + variables.cluster + \"'s\" + (variables.oldLabels[?'{cluster_label}'].orValue('') != '' ? ' (it is labelled for cluster ' + variables.oldLabels['{cluster_label}'] + ')' : ' (capstan did not create it)') + ': capstan takes over no object by accident; an admin who means it to be adopted annotates it {adopt}=' + variables.cluster"
            ),
        ),
        rule(
            &format!("!variables.tenant || {}", rules::named("request.name")),
            Reason::OutsideCluster,
            "'is not named for cluster ' + variables.cluster + ' (a workload directory writes only objects named ' + variables.cluster + ' or ' + variables.cluster + '-...)'",
        ),
        rule(
            &format!(
                "!variables.tenant || (request.?namespace.orValue('') != '' ? !(request.namespace in {} || request.namespace.startsWith('{RESERVED_PREFIX}') || (request.namespace.endsWith('{RESERVED_SUFFIX}') && request.namespace != '{SHARED_NAMESPACE}')) : {})",
                json!(RESERVED_NAMESPACES),
                cluster_scoped_kinds()
            ),
            Reason::ReservedNamespace,
            "'is in a namespace no workload cluster may write to'",
        ),
    ];
    // The kinds and versions a workload writes, and every field of them that names another
    // object (the reference table, as validation reads it), then the names controllers generate.
    validations.push(rules::kinds());
    validations.extend(rules::references());
    validations.extend(rules::reserved_names());
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": ["*"],
                    "apiVersions": ["*"],
                    "resources": ["*"],
                    "operations": ["CREATE", "UPDATE", "DELETE"],
                }],
            },
            "matchConditions": [{
                "name": "fleet-identity",
                "expression": format!("request.userInfo.username == '{WORKLOAD_USER}' || request.userInfo.username == '{MANAGEMENT_USER}'"),
            }],
            "variables": [
                {"name": "cluster", "expression": format!("has(request.userInfo.extra) && '{CLUSTER_EXTRA}' in request.userInfo.extra && size(request.userInfo.extra['{CLUSTER_EXTRA}']) == 1 ? request.userInfo.extra['{CLUSTER_EXTRA}'][0] : ''")},
                {"name": "tenant", "expression": format!("request.userInfo.username == '{WORKLOAD_USER}'")},
                {"name": "subject", "expression": "request.kind.kind + '/' + (request.?namespace.orValue('') != '' ? request.namespace + '/' : '') + request.name"},
                {"name": "labels", "expression": "object != null && has(object.metadata.labels) ? object.metadata.labels : {}"},
                {"name": "oldLabels", "expression": "oldObject != null && has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}"},
                {"name": "oldAnnotations", "expression": "oldObject != null && has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}"},
            ],
            "validations": validations,
        },
    })
}

/// The policy's binding: every namespace, denials enforced.
pub fn binding() -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY},
        "spec": {"policyName": POLICY, "validationActions": ["Deny"]},
    })
}

/// The name of the probe [`enforced`] writes (as a dry run: nothing is ever created).
pub const PROBE: &str = "capstan-tenancy-probe";

/// Whether the API server enforces the policy: a dry run, as the workload identity of cluster
/// [`PROBE`], of a ConfigMap in `default` (a namespace no workload cluster may write to) must
/// be refused by it. One request; it proves the boundary holds (the policy loaded, its binding
/// there, the identity's rights granted, the caller allowed to impersonate it) before the agent
/// writes anything.
pub async fn enforced(client: &kube::Client) -> Result<(), String> {
    use crate::k8s::identity::{Tenant, impersonating};
    use capstan_templates::identity::{MANAGED_BY, MANAGED_BY_LABEL};
    use kube::api::{Api, DynamicObject};
    let writer = impersonating(client, Tenant::Workload, PROBE);
    let resource =
        kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(writer, "default", &resource);
    let probe = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": PROBE, "namespace": "default",
            "labels": {MANAGED_BY_LABEL: MANAGED_BY, CLUSTER_LABEL: PROBE}}});
    let how = crate::write::Apply::by(crate::k8s::FIELD_MANAGER).dry_run();
    match crate::write::apply(&api, PROBE, &how, &probe).await {
        Err(kube::Error::Api(s))
            if denial(&s.message).is_some_and(|(r, _)| r == Reason::ReservedNamespace.as_str()) =>
        {
            Ok(())
        }
        Err(kube::Error::Api(s)) => Err(format!(
            "the tenancy boundary does not hold yet: a probe write as {WORKLOAD_USER} was refused with something else than the policy {POLICY}: {}",
            s.message
        )),
        Err(e) => Err(format!("probing the tenancy policy {POLICY}: {e}")),
        Ok(_) => Err(format!(
            "the ValidatingAdmissionPolicy {POLICY} is not enforced: a write of {WORKLOAD_USER} into namespace default was admitted"
        )),
    }
}

/// [`enforced`], asked again until it holds or `wait` has passed (the API server loads a new
/// policy and new bindings from its informers, a moment after they are written).
pub async fn wait_enforced(client: &kube::Client, wait: std::time::Duration) -> Result<(), String> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        match enforced(client).await {
            Ok(()) => return Ok(()),
            Err(e) if std::time::Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
        }
    }
}

/// The reason word and message of a denial by the policy, from the API server's message
/// (`… ValidatingAdmissionPolicy 'capstan-tenancy' with binding 'capstan-tenancy' denied request:
/// AlreadyExists: ConfigMap/ns/name exists …`).
pub fn denial(message: &str) -> Option<(&str, &str)> {
    let marker = format!("ValidatingAdmissionPolicy '{POLICY}'");
    let at = message.find(&marker)?;
    let rest = &message[at..];
    let text = &rest[rest.find("denied request: ")? + "denied request: ".len()..];
    let (reason, _) = text.split_once(": ")?;
    Some((reason, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denials_are_read_back_with_their_reason() {
        let m = "configmaps \"coredns\" is forbidden: ValidatingAdmissionPolicy 'capstan-tenancy' with binding 'capstan-tenancy' denied request: AlreadyExists: ConfigMap/kube-system/coredns exists and is not cluster mgmt's";
        assert_eq!(
            denial(m),
            Some((
                "AlreadyExists",
                "AlreadyExists: ConfigMap/kube-system/coredns exists and is not cluster mgmt's"
            ))
        );
        assert_eq!(
            denial("configmaps \"x\" is forbidden: User cannot patch"),
            None
        );
    }
}
