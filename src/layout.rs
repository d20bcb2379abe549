//! The tree's own rules, held by tests (docs/architecture.md#rules-the-tree-keeps): every path the
//! docs cite exists, no function is long past reading, no two files of `src/` import
//! each other in a loop, the API's wire types import nothing of the daemon, a launch's
//! plan nothing of its effects, the settings nothing of a launch or the egress proxy, and
//! `src/daemon/` keeps its parts in folders. Read as text with the habits `cargo fmt`
//! gives the code; nothing here is compiled into relay.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest a function may be, in lines from `fn` to its closing brace.
const FUNCTION_MAX: usize = 100;
/// The longest a function of the host's router may be (one function per route).
const ROUTER_FUNCTION_MAX: usize = 60;
const ROUTER: &str = "src/host/server.rs";
/// The most files `src/daemon/` holds at its top; the rest are in folders by role.
const DAEMON_TOP_MAX: usize = 10;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every file under `dir` (relative to the root) whose name ends with `ext`, sorted.
fn files(dir: &str, ext: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, ext, out);
            } else if p.to_string_lossy().ends_with(ext) {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root().join(dir), ext, &mut out);
    out.sort();
    out
}

fn relative(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

/// The code of a file without its `#[cfg(test)] mod tests` and its `//` comments.
fn code_of(text: &str) -> String {
    let text = match text.find("\n#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

// ---- the paths the docs cite ----------------------------------------------------

/// The folders a cited path starts with.
const CITED_ROOTS: &[&str] = &[
    "src/", "shim/", "e2e/", "fakes/", "tests/", "web/", "docs/", ".ci/",
];

/// What a run or the set-up makes (the suite's screenshots and screens; the browser
/// driver `npm ci` installs): cited, absent from a fresh clone.
const GENERATED: &[&str] = &["e2e/artifacts/", "e2e/browser/node_modules/"];

/// `name` matches `pattern`, whose `*` stands for any run of characters.
fn glob_match(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    if !name.ends_with(last) {
        return false;
    }
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

/// Whether a cited path (relative to the root; its last part may hold a `*`) names
/// something in the tree.
fn cited_exists(path: &str) -> bool {
    let path = path.trim_end_matches('/');
    if !path.contains('*') {
        return root().join(path).exists();
    }
    let (dir, pattern) = path.rsplit_once('/').unwrap_or(("", path));
    std::fs::read_dir(root().join(dir)).is_ok_and(|rd| {
        rd.flatten()
            .any(|e| glob_match(pattern, &e.file_name().to_string_lossy()))
    })
}

/// The tree's paths a page cites: a code span that starts with one of the tree's
/// folders (up to a `#` anchor or a `:line`), and every relative link.
fn citations(page: &Path, text: &str) -> Vec<(usize, String, PathBuf)> {
    let mut out = Vec::new();
    let here = page.parent().unwrap_or(root());
    for (n, line) in text.lines().enumerate() {
        for (i, span) in line.split('`').enumerate() {
            if i % 2 == 0 || !CITED_ROOTS.iter().any(|r| span.starts_with(r)) {
                continue;
            }
            let path = span.split([' ', '#']).next().unwrap_or(span);
            let path = path.split(':').next().unwrap_or(path);
            // A placeholder (`<pid>`, `…`) names no one file; what a run or the
            // set-up makes is not there in a fresh clone.
            if path.contains(['<', '…', '{']) || GENERATED.iter().any(|g| path.starts_with(g)) {
                continue;
            }
            out.push((n + 1, span.to_string(), root().join(path)));
        }
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = &rest[..end];
            rest = &rest[end..];
            let target = target.split('#').next().unwrap_or("");
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            out.push((n + 1, target.to_string(), here.join(target)));
        }
    }
    out
}

#[test]
fn every_path_the_docs_cite_exists() {
    let mut pages = files("docs", ".md");
    pages.push(root().join("README.md"));
    assert!(pages.len() > 5, "no docs found under {}", root().display());
    let mut missing = Vec::new();
    let mut seen = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for (line, cited, path) in citations(page, &text) {
            seen += 1;
            let rel = relative(&path);
            let ok = if path.starts_with(root()) && !rel.contains("..") {
                cited_exists(&rel)
            } else {
                path.exists()
            };
            if !ok {
                missing.push(format!("{}:{line}: {cited}", relative(page)));
            }
        }
    }
    assert!(
        seen > 100,
        "only {seen} citations found: the reader is broken"
    );
    assert!(
        missing.is_empty(),
        "paths the docs cite that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_citation_reader_finds_spans_links_and_globs() {
    let page = root().join("docs/x.md");
    let text = "see `src/lib.rs#x` and `src/daemon/*.rs`, [a](architecture.md#y), \
                `e2e/artifacts/a-<pid>/` and [b](https://example.com) `cargo test`";
    let got: Vec<String> = citations(&page, text).into_iter().map(|c| c.1).collect();
    assert_eq!(got, ["src/lib.rs#x", "src/daemon/*.rs", "architecture.md"]);
    assert!(cited_exists("src/daemon/*.rs"));
    assert!(!cited_exists("src/daemon/*.nothing"));
    assert!(!cited_exists("src/no-such-file.rs"));
    assert!(glob_match("*.rs", "a.rs") && !glob_match("*.rs", "a.rsx"));
    assert!(glob_match("a*b*c", "a-b-c") && !glob_match("a*b*c", "a-c"));
}

// ---- function lengths -----------------------------------------------------------

/// Every function of a file: (its name, the line it starts on, its length in lines),
/// from `fn` to the closing brace at the indent it started at.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        let mut words = body;
        for prefix in [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "async ",
            "const ",
            "unsafe ",
        ] {
            words = words.strip_prefix(prefix).unwrap_or(words);
        }
        if words.starts_with("pub(in ") {
            words = words.split_once(") ").map_or(words, |(_, w)| w);
            words = words.strip_prefix("async ").unwrap_or(words);
        }
        let Some(rest) = words.strip_prefix("fn ") else {
            continue;
        };
        if line.trim_end().ends_with(';') {
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let close = format!("{indent}}}");
        if let Some(end) = lines[i..].iter().position(|l| *l == close) {
            out.push((name, i + 1, end + 1));
        }
    }
    out
}

#[test]
fn no_function_is_longer_than_its_limit() {
    let mut long = Vec::new();
    let mut counted = 0;
    for dir in ["src", "shim/src"] {
        for f in files(dir, ".rs") {
            let rel = relative(&f);
            let max = if rel == ROUTER {
                ROUTER_FUNCTION_MAX
            } else {
                FUNCTION_MAX
            };
            for (name, line, len) in functions(&std::fs::read_to_string(&f).unwrap()) {
                counted += 1;
                if len > max {
                    long.push(format!(
                        "{rel}:{line}: {name} is {len} lines (at most {max})"
                    ));
                }
            }
        }
    }
    assert!(counted > 500, "only {counted} functions found");
    assert!(long.is_empty(), "functions too long:\n{}", long.join("\n"));
}

#[test]
fn the_function_reader_measures_from_fn_to_its_brace() {
    let text = "fn a() {\n    x;\n}\n\nimpl T {\n    pub async fn b(\n        y: u8,\n    ) {\n        z;\n    }\n    fn decl();\n}\n";
    assert_eq!(
        functions(text),
        [("a".to_string(), 1, 3), ("b".to_string(), 6, 5)]
    );
}

// ---- imports ----------------------------------------------------------------------

/// A module's path (`["daemon", "api"]`) for a file of `src/`.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// `use a::{b, c::{d, e}}` as its paths: `a::b`, `a::c::d`, `a::c::e`.
fn expand_use(tree: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (tree.find('{'), tree.rfind('}')) else {
        return vec![tree.split(" as ").next().unwrap_or(tree).to_string()];
    };
    if close < open {
        return vec![];
    }
    let prefix = tree[..open].trim_end_matches("::");
    let inner = &tree[open + 1..close];
    let (mut items, mut depth, mut cur) = (Vec::new(), 0, String::new());
    for c in inner.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    items.push(cur);
    items
        .iter()
        .filter(|i| !i.trim().is_empty())
        .flat_map(|i| expand_use(i.trim()))
        .map(|p| format!("{prefix}::{p}"))
        .collect()
}

/// The paths a file's code names: its `use` trees, and every `crate::`, `super::` and
/// `self::` path, and `child::` for a module it declares.
fn named_paths(code: &str, children: &BTreeSet<String>) -> Vec<String> {
    let flat: String = code.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = Vec::new();
    let mut rest = flat.as_str();
    while let Some(i) = rest.find("use ") {
        // A statement: after another item, a block's brace, an attribute or `pub`.
        let before = rest[..i].trim_end();
        rest = &rest[i + 4..];
        let statement = before.is_empty()
            || before.ends_with([';', '{', '}', ']'])
            || before.ends_with("pub")
            || before.ends_with("pub(crate)")
            || before.ends_with("pub(super)");
        if !statement {
            continue;
        }
        let end = rest.find(';').unwrap_or(rest.len());
        out.extend(expand_use(&rest[..end].replace(' ', "")));
    }
    let word = |c: char| c.is_alphanumeric() || c == '_' || c == ':';
    let bytes: Vec<char> = flat.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        if word(bytes[i]) && (i == 0 || !word(bytes[i - 1])) {
            let start = i;
            while i < bytes.len() && word(bytes[i]) {
                i += 1;
            }
            let token: String = bytes[start..i].iter().collect();
            let token = token.trim_end_matches(':');
            let head = token.split("::").next().unwrap_or("");
            if token.contains("::")
                && (matches!(head, "crate" | "super" | "self") || children.contains(head))
            {
                out.push(if children.contains(head) {
                    format!("self::{token}")
                } else {
                    token.to_string()
                });
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Which file of `modules` a path named in `from` lands in: the longest module that
/// prefixes it.
fn resolve(from: &[String], path: &str, modules: &BTreeSet<Vec<String>>) -> Option<Vec<String>> {
    let mut parts: Vec<&str> = path.split("::").collect();
    let mut base: Vec<String> = match parts.first() {
        Some(&"crate") => {
            parts.remove(0);
            vec![]
        }
        Some(&"self") | Some(&"super") => from.to_vec(),
        _ => return None,
    };
    // `self` is the module itself and `super` its parent, whether its file is
    // `a/b.rs` or `a/b/mod.rs`.
    while let Some(first) = parts.first() {
        match *first {
            "self" => {}
            "super" => {
                base.pop();
            }
            _ => break,
        }
        parts.remove(0);
    }
    let full: Vec<String> = base
        .into_iter()
        .chain(parts.iter().map(|s| s.to_string()))
        .collect();
    (0..=full.len())
        .rev()
        .map(|k| full[..k].to_vec())
        .find(|m| modules.contains(m))
}

/// Every import between two files of `src/` (the library: `main.rs` and `bin/` are
/// crates of their own), leaving out a module and the modules inside it: a folder's
/// `mod.rs` holds the state its parts take, and declares them.
fn import_graph() -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let src = root().join("src");
    let mut texts = BTreeMap::new();
    for f in files("src", ".rs") {
        let rel = f.strip_prefix(&src).unwrap().to_path_buf();
        if rel.starts_with("bin") || rel == Path::new("main.rs") || rel.starts_with("layout.rs") {
            continue;
        }
        texts.insert(
            module_of(&rel),
            code_of(&std::fs::read_to_string(&f).unwrap()),
        );
    }
    let modules: BTreeSet<Vec<String>> = texts.keys().cloned().collect();
    let mut graph = BTreeMap::new();
    for (m, code) in &texts {
        let children: BTreeSet<String> = modules
            .iter()
            .filter(|c| c.len() == m.len() + 1 && c.starts_with(m))
            .map(|c| c[m.len()].clone())
            .collect();
        let edges: BTreeSet<Vec<String>> = named_paths(code, &children)
            .iter()
            .filter_map(|p| resolve(m, p, &modules))
            .filter(|t| !t.starts_with(m) && !m.starts_with(t))
            .collect();
        graph.insert(m.clone(), edges);
    }
    graph
}

/// A loop of imports, if any: the files in order.
fn a_circle(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<Vec<String>>> {
    fn visit(
        m: &Vec<String>,
        graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        path: &mut Vec<Vec<String>>,
        done: &mut BTreeSet<Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            return Some(path[i..].to_vec());
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.clone());
        for t in graph.get(m).into_iter().flatten() {
            if let Some(c) = visit(t, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.clone());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(m, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_two_files_of_src_import_each_other_in_a_loop() {
    let graph = import_graph();
    let edges: usize = graph.values().map(BTreeSet::len).sum();
    assert!(
        edges > 100,
        "only {edges} imports found: the reader is broken"
    );
    if let Some(circle) = a_circle(&graph) {
        let names: Vec<String> = circle.iter().map(|m| m.join("::")).collect();
        panic!("an import circle: {} -> back", names.join(" -> "));
    }
}

#[test]
fn the_import_reader_sees_a_circle_and_leaves_a_folder_and_its_parts_alone() {
    let m = |s: &str| s.split("::").map(str::to_string).collect::<Vec<_>>();
    let modules: BTreeSet<Vec<String>> = ["daemon", "daemon::api", "wire", "wire::codes"]
        .iter()
        .map(|s| m(s))
        .collect();
    let children: BTreeSet<String> = ["codes".to_string()].into();
    let code =
        "use crate::daemon::{api::{self, Resp}, Daemon};\nfn f() { codes::Code::X; super::x(); }";
    let got: BTreeSet<Vec<String>> = named_paths(code, &children)
        .iter()
        .filter_map(|p| resolve(&m("wire"), p, &modules))
        .collect();
    assert_eq!(
        got,
        [m("daemon::api"), m("daemon"), m("wire::codes")].into()
    );
    let mut graph = BTreeMap::new();
    graph.insert(m("a"), [m("b")].into());
    graph.insert(m("b"), [m("c")].into());
    graph.insert(m("c"), BTreeSet::new());
    assert_eq!(a_circle(&graph), None);
    graph.insert(m("c"), [m("a")].into());
    assert_eq!(a_circle(&graph), Some(vec![m("a"), m("b"), m("c")]));
}

/// The modules `from` (a module and those inside it) imports that lie in `to`.
fn imports_between(from: &[&str], to: &[&str]) -> Vec<String> {
    let owned = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<String>>();
    let (from, to) = (owned(from), owned(to));
    import_graph()
        .into_iter()
        .filter(|(m, _)| m.starts_with(&from))
        .flat_map(|(m, edges)| {
            edges
                .into_iter()
                .filter(|t| t.starts_with(&to))
                .map(move |t| format!("{} imports {}", m.join("::"), t.join("::")))
        })
        .collect()
}

#[test]
fn a_launchs_plan_imports_nothing_of_its_effects() {
    // The plan decides; `launch/` carries it out (docs/architecture.md#source-tree).
    let found = imports_between(&["daemon", "plan"], &["daemon", "launch"]);
    assert!(found.is_empty(), "{}", found.join("\n"));
    // The reader sees such an import.
    assert!(!imports_between(&["daemon", "launch"], &["daemon", "plan"]).is_empty());
}

#[test]
fn the_settings_import_nothing_of_a_launch_or_the_egress_proxy() {
    // The settings are read and checked below a launch; the lists their checks read are
    // `src/sandbox/`'s (docs/architecture.md#rules-the-tree-keeps).
    for above in ["launch", "plan", "egress"] {
        let found = imports_between(&["daemon", "settings"], &["daemon", above]);
        assert!(found.is_empty(), "{}", found.join("\n"));
    }
    // The reader sees the settings' own imports.
    assert!(!imports_between(&["daemon", "settings"], &["sandbox"]).is_empty());
}

#[test]
fn the_wire_types_import_nothing_of_the_daemon() {
    for f in files("src/wire", ".rs")
        .into_iter()
        .chain([root().join("src/protocol.rs")])
    {
        // Tests included: the API's vocabulary stands alone.
        let text = std::fs::read_to_string(&f).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            assert!(
                !code.contains("daemon::"),
                "{}:{}: {}",
                relative(&f),
                n + 1,
                line.trim()
            );
        }
    }
}

#[test]
fn the_daemon_keeps_its_parts_in_folders() {
    let top: Vec<String> = std::fs::read_dir(root().join("src/daemon"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        top.len() <= DAEMON_TOP_MAX,
        "src/daemon/ holds {} files at its top (at most {DAEMON_TOP_MAX}): {top:?}",
        top.len()
    );
}
