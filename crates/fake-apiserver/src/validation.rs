//! kube-apiserver's validation of the kinds the fake serves: the rules and the messages of
//! `k8s.io/apimachinery/pkg/util/validation` and `pkg/apis/core/validation` (1.31), so a test
//! sees the 422 a real cluster gives.
//!
//! Hand-written on purpose: no Rust crate reproduces these exact rules and messages, and they
//! are what the tests compare with (the regexes are simple enough to check character by
//! character, which also spares a regex dependency).

use serde_json::Value;

use super::resource::ResourceType;

/// The ConfigMap limit: the total size of all values (`core.MaxSecretSize`).
pub(crate) const MAX_CONFIG_MAP_BYTES: usize = 1024 * 1024;
/// The total size of an object's annotations (`TotalAnnotationSizeLimitB`).
const MAX_ANNOTATION_BYTES: usize = 256 * 1024;
/// events.k8s.io limits (`pkg/apis/core/validation/events.go`).
const EVENT_NOTE_LIMIT: usize = 1024;
const EVENT_FIELD_LIMIT: usize = 128;

/// One `StatusCause` of a 422 answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`...
    pub(crate) reason: &'static str,
    /// The field path, e.g. `data[a/b]`.
    pub(crate) field: String,
    /// The error body, e.g. `Invalid value: "a/b": ...`.
    pub(crate) message: String,
}

impl Cause {
    pub(crate) fn invalid(field: impl Into<String>, value: &Value, detail: &str) -> Self {
        Self {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: format!("Invalid value: {}: {detail}", go_value(value)),
        }
    }

    pub(crate) fn required(field: impl Into<String>) -> Self {
        Self {
            reason: "FieldValueRequired",
            field: field.into(),
            message: "Required value".into(),
        }
    }

    fn duplicate(field: impl Into<String>, value: &str) -> Self {
        Self {
            reason: "FieldValueDuplicate",
            field: field.into(),
            message: format!("Duplicate value: {value}"),
        }
    }

    fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        Self {
            reason: "FieldValueForbidden",
            field: field.into(),
            message: format!("Forbidden: {detail}"),
        }
    }

    fn too_long(field: impl Into<String>, max: usize) -> Self {
        Self {
            reason: "FieldValueTooLong",
            field: field.into(),
            message: format!("Too long: must have at most {max} bytes"),
        }
    }

    fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> Self {
        let supported: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        Self {
            reason: "FieldValueNotSupported",
            field: field.into(),
            message: format!(
                "Unsupported value: {value:?}: supported values: {}",
                supported.join(", ")
            ),
        }
    }
}

/// How Go's `%v`/`%q` prints a field value in a message.
fn go_value(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(go_value).collect();
            format!("[]string{{{}}}", items.join(", "))
        }
        other => other.to_string(),
    }
}

/// The 422 `Invalid` Status for `causes`.
pub(crate) fn invalid_status(ty: &ResourceType, name: &str, causes: &[Cause]) -> Value {
    let qualified = if ty.group.is_empty() {
        ty.kind.clone()
    } else {
        format!("{}.{}", ty.kind, ty.group)
    };
    let errors: Vec<String> = causes
        .iter()
        .map(|c| {
            if c.field.is_empty() {
                c.message.clone()
            } else {
                format!("{}: {}", c.field, c.message)
            }
        })
        .collect();
    let joined = if errors.len() == 1 {
        errors[0].clone()
    } else {
        format!("[{}]", errors.join(", "))
    };
    let mut details = serde_json::json!({
        "name": name,
        "kind": ty.kind,
        "causes": causes.iter().map(|c| serde_json::json!({
            "reason": c.reason, "message": c.message, "field": c.field,
        })).collect::<Vec<_>>(),
    });
    if !ty.group.is_empty() {
        details["group"] = ty.group.clone().into();
    }
    super::status_body(
        422,
        "Invalid",
        &format!("{qualified} \"{name}\" is invalid: {joined}"),
        Some(details),
    )
}

fn is_alnum_lower(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
fn dns1123_label_shape(value: &str) -> bool {
    !value.is_empty()
        && value.starts_with(is_alnum_lower)
        && value.ends_with(is_alnum_lower)
        && value.chars().all(|c| is_alnum_lower(c) || c == '-')
}

pub(crate) fn dns1123_label(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 63 {
        errors.push("must be no more than 63 characters".to_owned());
    }
    if !dns1123_label_shape(value) {
        errors.push("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".to_owned());
    }
    errors
}

pub(crate) fn dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 253 {
        errors.push("must be no more than 253 characters".to_owned());
    }
    if !value.split('.').all(dns1123_label_shape) {
        errors.push("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_owned());
    }
    errors
}

pub(crate) fn dns1035_label(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 63 {
        errors.push("must be no more than 63 characters".to_owned());
    }
    if !(dns1123_label_shape(value) && value.starts_with(|c: char| c.is_ascii_lowercase())) {
        errors.push("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')".to_owned());
    }
    errors
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, the shape of label values and name parts.
fn qualified_shape(value: &str) -> bool {
    !value.is_empty()
        && value.starts_with(|c: char| c.is_ascii_alphanumeric())
        && value.ends_with(|c: char| c.is_ascii_alphanumeric())
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn qualified_name(value: &str) -> Vec<String> {
    const NAME_PART: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            let mut errors = Vec::new();
            if prefix.is_empty() {
                errors.push("prefix part must be non-empty".to_owned());
            } else {
                errors.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            return errors
                .into_iter()
                .chain(name_part(name, NAME_PART))
                .collect();
        }
        _ => {
            return vec!["a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".to_owned()];
        }
    };
    name_part(name, NAME_PART)
}

fn name_part(name: &str, shape: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if name.is_empty() {
        errors.push("name part must be non-empty".to_owned());
        return errors;
    }
    if name.len() > 63 {
        errors.push("name part must be no more than 63 characters".to_owned());
    }
    if !qualified_shape(name) {
        errors.push(shape.to_owned());
    }
    errors
}

fn label_value(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 63 {
        errors.push("must be no more than 63 characters".to_owned());
    }
    if !value.is_empty() && !qualified_shape(value) {
        errors.push("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".to_owned());
    }
    errors
}

fn config_map_key(key: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if key.len() > 253 {
        errors.push("must be no more than 253 characters".to_owned());
    }
    if key.is_empty()
        || !key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
    {
        errors.push("a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')".to_owned());
    }
    if key == "." {
        errors.push("must not be '.'".to_owned());
    } else if key == ".." {
        errors.push("must not be '..'".to_owned());
    } else if key.starts_with("..") {
        errors.push("must not start with '..'".to_owned());
    }
    errors
}

fn causes_for(field: &str, value: &str, messages: Vec<String>) -> impl Iterator<Item = Cause> {
    let (field, value) = (field.to_owned(), Value::from(value));
    messages
        .into_iter()
        .map(move |m| Cause::invalid(field.clone(), &value, &m))
}

/// Labels and selectors: keys are qualified names, values label values.
fn labels(map: &Value, field: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    for (key, value) in map.as_object().into_iter().flatten() {
        causes.extend(causes_for(field, key, qualified_name(key)));
        causes.extend(causes_for(
            field,
            value.as_str().unwrap_or_default(),
            label_value(value.as_str().unwrap_or_default()),
        ));
    }
    causes
}

/// `ValidateObjectMeta`: the name's shape per kind, labels, annotations.
fn object_meta(ty: &ResourceType, object: &Value) -> Vec<Cause> {
    let meta = &object["metadata"];
    let mut causes = Vec::new();
    if let Some(name) = meta["name"].as_str() {
        let messages = match ty.kind.as_str() {
            "Service" => dns1035_label(name),
            "Namespace" => dns1123_label(name),
            _ => dns1123_subdomain(name),
        };
        causes.extend(causes_for("metadata.name", name, messages));
    }
    causes.extend(labels(&meta["labels"], "metadata.labels"));
    let mut annotation_bytes = 0;
    for (key, value) in meta["annotations"].as_object().into_iter().flatten() {
        causes.extend(causes_for(
            "metadata.annotations",
            key,
            qualified_name(&key.to_lowercase()),
        ));
        annotation_bytes += key.len() + value.as_str().map_or(0, str::len);
    }
    if annotation_bytes > MAX_ANNOTATION_BYTES {
        causes.push(Cause::too_long(
            "metadata.annotations",
            MAX_ANNOTATION_BYTES,
        ));
    }
    causes
}

/// The size of a `binaryData` value as stored (its base64 text decoded).
fn decoded_len(base64: &str) -> usize {
    let digits = base64.trim_end_matches('=').len();
    digits * 3 / 4
}

fn config_map(object: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut total = 0;
    let binary = &object["binaryData"];
    for (key, value) in object["data"].as_object().into_iter().flatten() {
        let field = format!("data[{key}]");
        causes.extend(causes_for(&field, key, config_map_key(key)));
        if binary.get(key).is_some() {
            causes.push(Cause::invalid(
                &field,
                &key.as_str().into(),
                "duplicate of key present in binaryData",
            ));
        }
        total += value.as_str().map_or(0, str::len);
    }
    for (key, value) in binary.as_object().into_iter().flatten() {
        let field = format!("binaryData[{key}]");
        causes.extend(causes_for(&field, key, config_map_key(key)));
        total += value.as_str().map_or(0, decoded_len);
    }
    if total > MAX_CONFIG_MAP_BYTES {
        // The real server names no field here: the limit is on the whole object.
        causes.push(Cause::too_long("[]", MAX_CONFIG_MAP_BYTES));
    }
    if let Some(old) = old
        && old["immutable"] == true
    {
        const IMMUTABLE: &str = "field is immutable when `immutable` is set";
        if object["immutable"] != true {
            causes.push(Cause::forbidden("immutable", IMMUTABLE));
        }
        for field in ["data", "binaryData"] {
            if object[field] != old[field] {
                causes.push(Cause::forbidden(field, IMMUTABLE));
            }
        }
    }
    causes
}

fn service(object: &Value) -> Vec<Cause> {
    let spec = &object["spec"];
    let mut causes = Vec::new();
    let ty = spec["type"].as_str().unwrap_or("ClusterIP");
    const TYPES: [&str; 4] = ["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"];
    if !TYPES.contains(&ty) {
        causes.push(Cause::not_supported("spec.type", ty, &TYPES));
    }
    let headless = spec["clusterIP"] == "None";
    let ports = spec["ports"].as_array().map_or(&[][..], Vec::as_slice);
    if ports.is_empty() && !headless && ty != "ExternalName" {
        causes.push(Cause::required("spec.ports"));
    }
    let mut names = std::collections::BTreeSet::new();
    let mut seen = std::collections::BTreeSet::new();
    for (i, port) in ports.iter().enumerate() {
        let field = format!("spec.ports[{i}]");
        match port["name"].as_str().filter(|n| !n.is_empty()) {
            None if ports.len() > 1 => causes.push(Cause::required(format!("{field}.name"))),
            None => {}
            Some(name) => {
                causes.extend(causes_for(
                    &format!("{field}.name"),
                    name,
                    dns1123_label(name),
                ));
                if !names.insert(name) {
                    causes.push(Cause::duplicate(
                        format!("{field}.name"),
                        &format!("{name:?}"),
                    ));
                }
            }
        }
        let number = port["port"].as_i64().unwrap_or(0);
        if !(1..=65535).contains(&number) {
            causes.push(Cause::invalid(
                format!("{field}.port"),
                &number.into(),
                "must be between 1 and 65535, inclusive",
            ));
        }
        let protocol = port["protocol"].as_str().unwrap_or("TCP");
        const PROTOCOLS: [&str; 3] = ["SCTP", "TCP", "UDP"];
        if !PROTOCOLS.contains(&protocol) {
            causes.push(Cause::not_supported(
                format!("{field}.protocol"),
                protocol,
                &PROTOCOLS,
            ));
        }
        if !seen.insert((protocol, number)) {
            causes.push(Cause::duplicate(
                field,
                &format!("core.ServicePort{{Protocol:{protocol:?}, Port:{number}}}"),
            ));
        }
    }
    causes.extend(labels(&spec["selector"], "spec.selector"));
    if let (Some(ip), Some(first)) = (spec["clusterIP"].as_str(), spec["clusterIPs"].get(0))
        && first != ip
    {
        causes.push(Cause::invalid(
            "spec.clusterIPs",
            &spec["clusterIPs"],
            "first value must match `spec.clusterIP`",
        ));
    }
    causes
}

fn lease(object: &Value) -> Vec<Cause> {
    let spec = &object["spec"];
    let mut causes = Vec::new();
    if let Some(duration) = spec["leaseDurationSeconds"].as_i64()
        && duration <= 0
    {
        causes.push(Cause::invalid(
            "spec.leaseDurationSeconds",
            &duration.into(),
            "must be greater than 0",
        ));
    }
    if let Some(transitions) = spec["leaseTransitions"].as_i64()
        && transitions < 0
    {
        causes.push(Cause::invalid(
            "spec.leaseTransitions",
            &transitions.into(),
            "must be greater than or equal to 0",
        ));
    }
    causes
}

/// Events with an `eventTime` (all of events.k8s.io/v1, and new-style core ones).
fn event(ty: &ResourceType, object: &Value) -> Vec<Cause> {
    let events_api = ty.group == "events.k8s.io";
    let (controller_field, note_field, regarding) = if events_api {
        ("reportingController", "note", &object["regarding"])
    } else {
        ("reportingComponent", "message", &object["involvedObject"])
    };
    let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
    let mut causes = Vec::new();
    let has_time = object["eventTime"].as_str().is_some_and(|t| !t.is_empty());
    if !has_time {
        if events_api {
            causes.push(Cause::required("eventTime"));
        } else {
            // An old-style core Event: only its namespace is checked.
            let regarding_ns = regarding["namespace"].as_str().unwrap_or_default();
            let matches = if regarding_ns.is_empty() {
                namespace.is_empty() || namespace == "default"
            } else {
                regarding_ns == namespace
            };
            if !matches {
                causes.push(Cause::invalid(
                    "involvedObject.namespace",
                    &regarding_ns.into(),
                    "does not match event.namespace",
                ));
            }
            return causes;
        }
    }
    let text = |field: &str| object[field].as_str().unwrap_or_default().to_owned();
    let controller = text(controller_field);
    if controller.is_empty() {
        causes.push(Cause::required(controller_field));
    } else {
        causes.extend(causes_for(
            controller_field,
            &controller,
            qualified_name(&controller),
        ));
    }
    for field in ["reportingInstance", "action", "reason"] {
        let value = text(field);
        if value.is_empty() {
            causes.push(Cause::required(field));
        } else if value.len() > EVENT_FIELD_LIMIT {
            causes.push(Cause::invalid(
                field,
                &"".into(),
                &format!("can have at most {EVENT_FIELD_LIMIT} characters"),
            ));
        }
    }
    if text(note_field).len() > EVENT_NOTE_LIMIT {
        causes.push(Cause::invalid(
            note_field,
            &"".into(),
            &format!("can have at most {EVENT_NOTE_LIMIT} characters"),
        ));
    }
    let event_type = text("type");
    if events_api && event_type != "Normal" && event_type != "Warning" {
        causes.push(Cause::invalid(
            "type",
            &"".into(),
            &format!("has invalid value: {event_type}"),
        ));
    }
    causes
}

/// Everything the real server checks on a create (`old` None) or an update of `object`.
pub(crate) fn validate(ty: &ResourceType, object: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = object_meta(ty, object);
    match ty.kind.as_str() {
        "ConfigMap" => causes.extend(config_map(object, old)),
        "Service" => causes.extend(service(object)),
        "Lease" => causes.extend(lease(object)),
        "Event" => causes.extend(event(ty, object)),
        _ => {}
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_dns_rules_of_their_kind() {
        assert!(dns1035_label("hairpin-a-b").is_empty());
        assert_eq!(dns1035_label("1abc").len(), 1);
        assert_eq!(dns1035_label(&"a".repeat(64)).len(), 1);
        assert!(dns1123_label("1abc").is_empty());
        assert!(dns1123_subdomain("a.b-c.d").is_empty());
        assert_eq!(dns1123_subdomain("a..b").len(), 1);
        assert_eq!(dns1123_subdomain("A").len(), 1);
        assert_eq!(dns1123_subdomain(&"a".repeat(254)).len(), 1);
    }

    #[test]
    fn labels_keys_and_config_keys_follow_their_rules() {
        assert!(qualified_name("app.kubernetes.io/managed-by").is_empty());
        assert_eq!(qualified_name("a/b/c").len(), 1);
        assert_eq!(qualified_name("/b"), vec!["prefix part must be non-empty"]);
        assert!(label_value("").is_empty());
        assert!(label_value("My_value.1").is_empty());
        assert_eq!(label_value("-x").len(), 1);
        assert_eq!(label_value(&"x".repeat(64)).len(), 1);
        assert!(config_map_key("Corefile").is_empty());
        assert!(config_map_key("a.b_c-d").is_empty());
        assert_eq!(config_map_key("a/b").len(), 1);
        assert_eq!(config_map_key(".."), vec!["must not be '..'"]);
        assert_eq!(config_map_key("..x"), vec!["must not start with '..'"]);
    }

    #[test]
    fn binary_data_counts_its_decoded_size() {
        assert_eq!(decoded_len("aGVsbG8="), 5);
        assert_eq!(decoded_len("aGVsbG8h"), 6);
    }
}
