//! "Did you mean": the declared name nearest a mistyped one, for error messages.

/// The name among `names` nearest `typed` (a typo), if one is near: at most two edits away, or a
/// quarter of the name's length for long names. Of two as near, the one first in alphabetical order.
pub(crate) fn nearest<'a>(
    names: impl IntoIterator<Item = &'a str>,
    typed: &str,
) -> Option<&'a str> {
    names
        .into_iter()
        .map(|name| (edit_distance(name, typed), name))
        .filter(|(d, name)| *d <= 2.max(name.len() / 4))
        .min()
        .map(|(_, name)| name)
}

/// Levenshtein distance, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(above + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_near_name_is_offered_and_a_far_one_is_not() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(nearest(["backup", "cleanup"], "bakup"), Some("backup"));
        assert_eq!(nearest(["backup", "cleanup"], "deploy"), None);
        assert_eq!(
            nearest(["max-attempts"], "max_attempts"),
            Some("max-attempts")
        );
    }
}
