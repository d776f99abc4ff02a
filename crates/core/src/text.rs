//! Small text helpers shared by layers that must not depend on each other (store, toolpack).

/// Cut `text` to at most `max` characters (not bytes, so multi-byte text stays valid), marking
/// the cut with `…`.
pub fn cap_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some(_) => {
            let kept: String = text.chars().take(max.saturating_sub(1)).collect();
            format!("{kept}…")
        }
    }
}

/// A number as a limit is written: whole numbers without decimals.
pub fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 { format!("{}", v as i64) } else { format!("{v}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_capped_by_chars() {
        let long = "é".repeat(1000);
        let capped = cap_chars(&long, 600);
        assert_eq!(capped.chars().count(), 600);
        assert!(capped.ends_with('…'));
        assert_eq!(cap_chars("short", 600), "short");
        assert_eq!(cap_chars(&"x".repeat(600), 600), "x".repeat(600));
    }
}
