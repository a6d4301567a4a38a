//! The book (`docs/`, an mdBook) and the README hold together: every page is in the book's
//! summary, and every link resolves — a relative link to a file that exists, an `#anchor` to a
//! heading of its page (as mdBook makes heading ids), a link to this repository's files
//! (`https://github.com/spoold-rs/spoold/blob/main/PATH`) to a file that is here. Nothing is
//! fetched: other external links are not checked. `scripts/test` also builds the book with
//! `mdbook build docs`, which fails on a page the summary names and that does not exist.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// How the book links to files of the repository outside it (a built book has no `../..`).
const REPO_FILES: [&str; 2] = [
    "https://github.com/spoold-rs/spoold/blob/main/",
    "https://github.com/spoold-rs/spoold/tree/main/",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository")
}

fn book_pages(dir: &Path, pages: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("docs/src").flatten() {
        let path = entry.path();
        if path.is_dir() {
            book_pages(&path, pages);
        } else if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
}

/// The lines of a Markdown file with fenced code blocks blanked and inline code removed: links
/// are only what is left.
fn prose(text: &str) -> Vec<String> {
    let mut inside = false;
    text.lines()
        .map(|line| {
            if line.trim_start().starts_with("```") {
                inside = !inside;
                return String::new();
            }
            if inside {
                return String::new();
            }
            line.split('`').step_by(2).collect::<Vec<_>>().join("")
        })
        .collect()
}

/// The link targets of a line: `[text](target)` and `![alt](target)`.
fn links(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        let target = &after[..end];
        if !target.is_empty() && !target.contains(char::is_whitespace) {
            found.push(target.to_owned());
        }
        rest = &after[end..];
    }
    found
}

/// The ids mdBook gives the headings of a page: the heading's text (links and code marks
/// dropped) lower-cased, letters, digits, `_` and `-` kept, white space made `-`, the rest
/// dropped; a repeated id gets `-1`, `-2`…
fn heading_ids(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut ids = BTreeSet::new();
    let mut inside = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            inside = !inside;
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if inside || hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let mut heading = line[hashes + 1..].to_owned();
        // [text](target) → text
        while let (Some(open), Some(mid)) = (heading.find('['), heading.find("](")) {
            let Some(close) = heading[mid..].find(')').map(|c| mid + c) else {
                break;
            };
            if open > mid {
                break;
            }
            heading = format!(
                "{}{}{}",
                &heading[..open],
                &heading[open + 1..mid],
                &heading[close + 1..]
            );
        }
        let id: String = heading
            .chars()
            .filter_map(|c| {
                if c.is_alphanumeric() || c == '_' || c == '-' {
                    Some(c.to_lowercase().collect::<String>())
                } else if c.is_whitespace() {
                    Some("-".to_owned())
                } else {
                    None
                }
            })
            .collect();
        let n = seen.entry(id.clone()).or_insert(0);
        let id = if *n == 0 { id } else { format!("{id}-{n}") };
        *n += 1;
        ids.insert(id);
    }
    ids
}

/// Every link of the README and of every page of the book resolves.
#[test]
fn every_link_in_the_book_and_the_readme_resolves() {
    let repo = repo();
    let book = repo.join("docs/src");
    let mut files = Vec::new();
    book_pages(&book, &mut files);
    files.push(repo.join("README.md"));
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a page");
        let shown = file
            .strip_prefix(&repo)
            .expect("in the repository")
            .display();
        let in_book = file.starts_with(&book);
        for (n, line) in prose(&text).iter().enumerate() {
            for link in links(line) {
                let here = format!("{shown}:{}: {link}", n + 1);
                let (path, anchor) = match link.split_once('#') {
                    Some((path, anchor)) => (path, Some(anchor)),
                    None => (link.as_str(), None),
                };
                let target =
                    if let Some(inside) = REPO_FILES.iter().find_map(|r| path.strip_prefix(r)) {
                        repo.join(inside)
                    } else if path.contains(':') {
                        continue; // another site: not fetched
                    } else if path.is_empty() {
                        file.clone()
                    } else {
                        let joined = file.parent().expect("a directory").join(path);
                        match joined.canonicalize() {
                            Ok(target) => target,
                            Err(_) => {
                                broken.push(format!("{here}: no such file"));
                                continue;
                            }
                        }
                    };
                if !target.exists() {
                    broken.push(format!("{here}: no such file in the repository"));
                    continue;
                }
                if !target.starts_with(&repo) {
                    broken.push(format!("{here}: outside the repository"));
                    continue;
                }
                if in_book && !path.contains(':') && !target.starts_with(&book) {
                    broken.push(format!(
                        "{here}: a page links to a file outside the book, which a built book \
                         does not have: link to {}PATH",
                        REPO_FILES[0]
                    ));
                    continue;
                }
                if let Some(anchor) = anchor {
                    if target.extension().is_some_and(|e| e == "md") {
                        let ids =
                            heading_ids(&std::fs::read_to_string(&target).expect("the target"));
                        if !ids.contains(anchor) {
                            broken.push(format!("{here}: no heading has the id {anchor:?}"));
                        }
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// Every page of the book is in its summary (mdBook leaves a page out of the book otherwise),
/// and everything the summary names is a page.
#[test]
fn every_page_of_the_book_is_in_its_summary() {
    let book = repo().join("docs/src");
    let summary = std::fs::read_to_string(book.join("SUMMARY.md")).expect("docs/src/SUMMARY.md");
    let named: BTreeSet<String> = prose(&summary).iter().flat_map(|l| links(l)).collect();
    let mut pages = Vec::new();
    book_pages(&book, &mut pages);
    let pages: BTreeSet<String> = pages
        .iter()
        .map(|p| {
            p.strip_prefix(&book)
                .expect("in the book")
                .display()
                .to_string()
        })
        .filter(|p| p != "SUMMARY.md")
        .collect();
    let missing: Vec<_> = pages.difference(&named).collect();
    assert!(missing.is_empty(), "pages not in SUMMARY.md: {missing:?}");
    let not_pages: Vec<_> = named.difference(&pages).collect();
    assert!(
        not_pages.is_empty(),
        "SUMMARY.md names what is no page: {not_pages:?}"
    );
}

/// The heading ids are mdBook's (checked against a build of the book when it was written).
#[test]
fn heading_ids_are_made_as_mdbook_makes_them() {
    let ids = heading_ids(
        "# Title\n## Issue 45: a supervisor per attempt (2026-12-06, 14:47–14:59 UTC)\n\
         ```\n# not a heading\n```\n## The `dist` [profile](x.md)\n## Title\n",
    );
    let want: BTreeSet<String> = [
        "title",
        "issue-45-a-supervisor-per-attempt-2026-12-06-14471459-utc",
        "the-dist-profile",
        "title-1",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(ids, want);
}
