//! Public docs speak to users: they cite the papers by title, never the
//! project's internal notes (design documents, numbered paper extractions,
//! reference files) that a user of the crate does not have. Checks every doc
//! comment of the crates, the guide's pages and the README.

use std::path::{Path, PathBuf};

/// Words that only make sense to someone with the project's private notes.
const PRIVATE_CITATIONS: &[&str] = &[
    "seed 0",
    "seeds/",
    "design.md",
    "rdmc-original",
    "reference/",
    "perf-notes",
    "libfabric-feasibility",
    "emulated-cluster.md",
    "rust-anchors",
];

/// Every file under `dir` whose extension is `ext`.
fn files_with(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_with(&path, ext, out);
        } else if path.extension().is_some_and(|e| e == ext) {
            out.push(path);
        }
    }
}

/// Each offending line as `file:line: text`.
fn citations_in(path: &Path, docs_only: bool) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            let t = line.trim_start();
            !docs_only || t.starts_with("///") || t.starts_with("//!") || t.starts_with("#[doc")
        })
        .filter(|(_, line)| {
            let lower = line.to_lowercase();
            PRIVATE_CITATIONS.iter().any(|c| lower.contains(c))
        })
        .map(|(i, line)| format!("{}:{}: {}", path.display(), i + 1, line.trim()))
        .collect()
}

#[test]
fn docs_cite_papers_not_private_files() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = crate_dir.parent().unwrap();
    let mut files = Vec::new();
    files_with(&crate_dir.join("src"), "rs", &mut files);
    files_with(&root.join("rdmc-cli/src"), "rs", &mut files);
    files_with(&root.join("rdmc-proto/src"), "rs", &mut files);
    files_with(&root.join("rdmc-sim/src"), "rs", &mut files);
    assert!(files.len() > 20, "found only {} source files", files.len());
    let mut found: Vec<String> = files.iter().flat_map(|f| citations_in(f, true)).collect();
    // Markdown included into the docs (the guide) is documentation throughout.
    let mut pages = vec![root.join("README.md")];
    files_with(&crate_dir.join("src"), "md", &mut pages);
    assert!(pages.len() > 1, "found no guide pages under src/");
    found.extend(pages.iter().flat_map(|f| citations_in(f, false)));
    assert!(
        found.is_empty(),
        "docs cite files users don't have:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_catches_a_citation() {
    let dir = std::env::temp_dir().join(format!("rdmc-doc-cite-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("x.rs");
    std::fs::write(
        &file,
        "/// As DESIGN.md §3 says.\n// seed 001, in a private comment\nfn x() {}\n",
    )
    .unwrap();
    let found = citations_in(&file, true);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
}
