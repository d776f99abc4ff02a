//! JSON Schema compilation for tool and WebUI input schemas, with errors that name where in the
//! schema the problem is. Compiled validators are kept by the registry and reused for every call.

use jsonschema::Validator;
use serde_json::Value;

/// Why a schema does not compile: the JSON pointer inside the schema and the reason.
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaError {
    pub pointer: String,
    pub message: String,
}

/// Compile a tool input schema, or say everything that is wrong with it (one error per place,
/// in the schema's order). The meta-schema check catches typos such as `"type": "strng"`;
/// tool inputs are always JSON objects, so a root `type` other than `object` is refused too.
pub fn compile(schema: &Value) -> Result<Validator, Vec<SchemaError>> {
    let mut errors = Vec::new();
    if let Some(t) = schema.get("type")
        && t != "object"
    {
        errors.push(SchemaError {
            pointer: "/type".into(),
            message: format!("tool input schemas must have type \"object\", got {t}"),
        });
    }
    // The validator stops at the first problem; the meta-schema's own validator lists them all.
    if let Ok(meta) = jsonschema::meta::validator_for(schema) {
        for e in meta.iter_errors(schema) {
            let error = schema_error(e.instance_path().to_string(), e.instance().as_ref(), e.to_string());
            if !errors.iter().any(|known: &SchemaError| known.pointer == error.pointer) {
                errors.push(error);
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    // What the meta-schema cannot see (a `$ref` to nowhere, a bad regex) fails the build.
    jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
        .map_err(|e| vec![schema_error(e.instance_path().to_string(), e.instance().as_ref(), e.to_string())])
}

fn schema_error(pointer: String, instance: &Value, message: String) -> SchemaError {
    // The meta-schema's own wording for a misspelt type ("not valid under any of the schemas
    // listed in the 'anyOf' keyword") does not tell a pack author what to write instead.
    let message = match (pointer.ends_with("/type"), instance) {
        (true, Value::String(t)) => format!(
            "\"{t}\" is not a valid JSON Schema type (use one of array, boolean, integer, null, number, object, string)"
        ),
        _ => message,
    };
    SchemaError { pointer: if pointer.is_empty() { "/".to_string() } else { pointer }, message }
}

/// One reason an input does not match its schema: where in the input, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputError {
    pub pointer: String,
    pub message: String,
}

pub fn check_input(validator: &Validator, input: &Value) -> Result<(), Vec<InputError>> {
    let errors: Vec<InputError> = validator
        .iter_errors(input)
        .map(|e| {
            let mut pointer = e.instance_path().to_string();
            // A missing required field (or one that is not allowed) is reported at the object;
            // point at the field itself, which is what a form or a model needs to fix.
            match e.kind() {
                jsonschema::error::ValidationErrorKind::Required { property } => {
                    if let Some(name) = property.as_str() {
                        pointer = format!("{pointer}/{name}");
                    }
                }
                jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected }
                    if unexpected.len() == 1 =>
                {
                    pointer = format!("{pointer}/{}", unexpected[0]);
                }
                _ => {}
            }
            InputError { pointer, message: e.to_string() }
        })
        .collect();
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn typo_in_type_names_the_schema_path() {
        let err = compile(&json!({"type": "object", "properties": {"a": {"type": "strng"}}})).unwrap_err();
        assert_eq!(err.iter().map(|e| e.pointer.as_str()).collect::<Vec<_>>(), ["/properties/a/type"]);
    }

    #[test]
    fn root_must_be_an_object_schema() {
        assert_eq!(compile(&json!({"type": "string"})).unwrap_err()[0].pointer, "/type");
    }

    /// Regression: only the first of two mistakes was reported, the next after a fix.
    #[test]
    fn every_mistake_of_a_schema_is_reported() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "strng"}, "b": {"minLength": -1}}});
        let mut pointers: Vec<String> = compile(&schema).unwrap_err().into_iter().map(|e| e.pointer).collect();
        pointers.sort();
        assert_eq!(pointers, ["/properties/a/type", "/properties/b/minLength"]);
    }

    #[test]
    fn inputs_are_checked_with_their_paths() {
        let v =
            compile(&json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["s"]})).unwrap();
        let errors = check_input(&v, &json!({"n": "x"})).unwrap_err();
        let pointers: Vec<&str> = errors.iter().map(|e| e.pointer.as_str()).collect();
        assert_eq!(pointers.len(), 2);
        assert!(pointers.contains(&"/n") && pointers.contains(&"/s"), "{pointers:?}");
        assert!(check_input(&v, &json!({"n": 1, "s": 2})).is_ok());
    }

    /// The WebUI's form hints (web/ui/forms.js) are unknown formats and `x-` keywords to the
    /// validator: the schema compiles and they accept any string, while the standard keywords
    /// next to them still apply.
    #[test]
    fn webui_form_hints_neither_fail_compilation_nor_reject_input() {
        let v = compile(&json!({
            "type": "object",
            "properties": {
                "agent": {"type": "string", "format": "agent-id", "x-empty-label": "(any)", "minLength": 1},
                "from": {"type": "string", "format": "participant-id"},
                "channel": {"type": "string", "format": "channel"},
                "body": {"type": "string", "x-multiline": 5},
                "note": {"type": "string", "x-multiline": true}
            }
        }))
        .unwrap();
        let input = json!({"agent": "pm", "from": "user", "channel": "#team", "body": "a\nb", "note": "x"});
        assert!(check_input(&v, &input).is_ok());
        let errors = check_input(&v, &json!({"agent": "", "body": 3})).unwrap_err();
        let mut pointers: Vec<&str> = errors.iter().map(|e| e.pointer.as_str()).collect();
        pointers.sort();
        assert_eq!(pointers, ["/agent", "/body"]);
    }
}
