//! The documentation, checked: every runnable example of `docs/*.md` and `README.md` runs
//! against the real binary and must print what the document shows, every relative link must
//! lead somewhere, and so must every pointer into `docs/` from the sources.
//!
//! **Runnable examples.** A fenced block tagged `sh` directly followed (blank lines aside) by
//! a block tagged `text` is an example: the first is run with `sh` and its output (stdout
//! and stderr together) must match the second, where `…` stands for any text, line breaks
//! included. A `sh` block that runs `curl` must be such an example, so no request shown goes
//! unchecked. The examples of one document run in its order against one fresh pair of
//! servers, as its reader would: a simulated tool gateway and `connop gateway --http` with the
//! agent command the block tagged `sh setup` writes, named by `API`, `KEY`, `SIM` and
//! `TOKEN`, with the binary first on the `PATH`. What the documents say starts those servers
//! must be what this test starts.
//!
//! **Links.** Every link of a document that is not a URL names a file or folder of the
//! repository, and an anchor names a heading of the document it points into (GitHub's
//! anchors).
//!
//! **Citations.** The repository's own sources (code, scripts, docs) cite nothing outside it:
//! every `docs/<name>.md#<anchor>` they name exists, and no section of a document the
//! repository does not hold is cited.
//!
//! The examples need the `curl` binary (`apt-get install -y curl`).

mod support;

use std::collections::{BTreeMap, HashSet};
use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::channel;
use std::time::Duration;
use support::{BOUND, connop, spawn_announcing, wait_bounded};

/// The API key the documents' gateway requires.
const KEY: &str = "s3cret";
/// The simulated tool gateway's token in the documents.
const TOKEN: &str = "sim-token";
/// The addresses the documents use; the test's servers take free ports instead.
const DOC_API: &str = "127.0.0.1:8642";
const DOC_SIM: &str = "127.0.0.1:8700";
/// The agent command the documents' gateway runs (written by the `sh setup` block).
const AGENT: &str = "./agent.sh";

/// How long one example may run before the test gives up on it.
const EXAMPLE_BOUND: Duration = Duration::from_secs(60);

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository's root")
}

/// The documents: `README.md` and every `docs/*.md`, as paths from the root.
fn documents() -> Vec<PathBuf> {
    let mut docs = vec![PathBuf::from("README.md")];
    let mut found: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .map(|path| Path::new("docs").join(path.file_name().expect("a file name")))
        .collect();
    found.sort();
    docs.extend(found);
    docs
}

fn read(doc: &Path) -> String {
    std::fs::read_to_string(root().join(doc)).unwrap_or_else(|e| panic!("{}: {e}", doc.display()))
}

/// One fenced code block.
#[derive(Debug)]
struct Block {
    /// The info string: `sh`, `text`, `sh setup`, ….
    info: String,
    /// The contents, one `\n` after each line.
    text: String,
    /// The line of its opening fence, from 1.
    line: usize,
    /// Whether only blank lines stand between it and the block before.
    follows_block: bool,
}

impl Block {
    /// The language: the info string's first word.
    fn language(&self) -> &str {
        self.info.split_whitespace().next().unwrap_or("")
    }
}

/// A line that opens or closes a fence: up to three spaces, then three or more backticks;
/// the fence and the info string after it.
fn fence(line: &str) -> Option<(usize, &str)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let ticks = rest.len() - rest.trim_start_matches('`').len();
    (ticks >= 3).then(|| (ticks, rest[ticks..].trim()))
}

/// The fenced code blocks of a document, and the document with them blanked out (the prose,
/// where headings and links are).
fn blocks(markdown: &str) -> (Vec<Block>, String) {
    let mut blocks = Vec::new();
    let mut prose = String::new();
    let mut open: Option<(usize, Block)> = None;
    let mut only_blank_since_block = false;
    for (i, line) in markdown.lines().enumerate() {
        match (&mut open, fence(line)) {
            (Some((ticks, _)), Some((closing, ""))) if closing >= *ticks => {
                let (_, block) = open.take().expect("an open block");
                blocks.push(block);
                only_blank_since_block = true;
                prose.push('\n');
            }
            (Some((_, block)), _) => {
                block.text.push_str(line);
                block.text.push('\n');
                prose.push('\n');
            }
            (None, Some((ticks, info))) => {
                open = Some((
                    ticks,
                    Block {
                        info: info.to_owned(),
                        text: String::new(),
                        line: i + 1,
                        follows_block: only_blank_since_block,
                    },
                ));
                prose.push('\n');
            }
            (None, None) => {
                if !line.trim().is_empty() {
                    only_blank_since_block = false;
                }
                prose.push_str(line);
                prose.push('\n');
            }
        }
    }
    (blocks, prose)
}

/// One runnable example: a command and what it prints.
#[derive(Debug)]
struct Example {
    line: usize,
    command: String,
    expected: String,
}

/// The runnable examples of a document, in order; an error for a `curl` block without its
/// expected output.
fn examples(doc: &Path, blocks: &[Block]) -> Result<Vec<Example>, String> {
    let mut examples = Vec::new();
    for (i, block) in blocks.iter().enumerate() {
        if block.info != "sh" {
            continue;
        }
        match blocks.get(i + 1) {
            Some(next) if next.follows_block && next.info == "text" => examples.push(Example {
                line: block.line,
                command: block.text.clone(),
                expected: next.text.clone(),
            }),
            _ if block.text.contains("curl ") => {
                return Err(format!(
                    "{}:{}: a curl example needs its output in a `text` block right after it",
                    doc.display(),
                    block.line
                ));
            }
            _ => {}
        }
    }
    Ok(examples)
}

/// Text as compared: line breaks as `\n`, no whitespace at the end of a line or of the text.
fn normalized(text: &str) -> String {
    let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    lines.join("\n").trim_end().to_owned()
}

/// Whether `actual` matches `pattern` whole, where each `…` of the pattern stands for any
/// text (none included).
fn matches(pattern: &str, actual: &str) -> bool {
    let pieces: Vec<&str> = pattern.split('…').collect();
    let (first, rest) = pieces.split_first().expect("split yields a piece");
    let Some(mut left) = actual.strip_prefix(first) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return left.is_empty();
    };
    // The leftmost place for each middle piece leaves the most room for what follows.
    for piece in middle {
        match left.find(piece) {
            Some(at) => left = &left[at + piece.len()..],
            None => return false,
        }
    }
    left.ends_with(last)
}

/// The `sh setup` block of the documents, and the one that starts their servers: checked
/// against what [`Servers`] starts.
fn setup() -> String {
    let doc = Path::new("docs/http-api.md");
    let (blocks, _) = blocks(&read(doc));
    let setups: Vec<&Block> = blocks.iter().filter(|b| b.info == "sh setup").collect();
    assert_eq!(
        setups.len(),
        1,
        "{} has one `sh setup` block (the agent command)",
        doc.display()
    );
    let start = blocks
        .iter()
        .find(|b| b.language() == "sh" && b.text.contains("connop gateway --http"))
        .unwrap_or_else(|| panic!("{} shows how to start the servers", doc.display()));
    let gateway_url =
        format!("CONNECTOR_GATEWAY_URL=http://{DOC_SIM} CONNECTOR_GATEWAY_TOKEN={TOKEN}");
    for line in [
        format!("connop sim-gateway --listen {DOC_SIM} --token {TOKEN} &"),
        gateway_url,
        format!("connop gateway --http {DOC_API} --api-key {KEY} --agent-cmd {AGENT} &"),
        format!("export API=http://{DOC_API} KEY={KEY} SIM=http://{DOC_SIM} TOKEN={TOKEN}"),
    ] {
        assert!(
            start.text.contains(&line),
            "{}:{}: the servers the examples run against are started with `{line}`; change \
             this test with the document",
            doc.display(),
            start.line
        );
    }
    setups[0].text.clone()
}

/// A folder of its own, removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir =
            std::env::temp_dir().join(format!("connop-docs-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch folder");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The servers a document's examples run against, as its setup starts them.
struct Servers {
    sim: Option<Child>,
    gateway: Option<Child>,
    /// `http://…` of the simulated tool gateway, and of the API.
    sim_url: String,
    api_url: String,
    /// Where the examples run (the agent command is there); `CONNOP_HOME` is `home` in it.
    dir: Scratch,
}

impl Servers {
    fn start(name: &str, setup: &str) -> Self {
        let dir = Scratch::new(name);
        let status = Command::new("sh")
            .args(["-e", "-c", setup])
            .current_dir(&dir.0)
            .status()
            .expect("sh runs the setup");
        assert!(status.success(), "the setup block failed: {status}");

        let mut sim_command = connop();
        sim_command
            .args(["sim-gateway", "--listen", "127.0.0.1:0", "--token", TOKEN])
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        let (sim, sim_listening, _) = spawn_announcing(&mut sim_command);
        let sim_url = sim_listening
            .recv_timeout(BOUND)
            .expect("the simulated tool gateway listens");

        let mut gateway_command = connop();
        gateway_command
            .args(["gateway", "--http", "127.0.0.1:0", "--api-key", KEY])
            .args(["--agent-cmd", AGENT])
            .env("CONNECTOR_GATEWAY_URL", &sim_url)
            .env("CONNECTOR_GATEWAY_TOKEN", TOKEN)
            .env("CONNOP_HOME", dir.0.join("home"))
            .current_dir(&dir.0)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        let (gateway, api_listening, stderr) = spawn_announcing(&mut gateway_command);
        let api_url = api_listening
            .recv_timeout(BOUND)
            .unwrap_or_else(|_| panic!("the API listens; stderr: {:?}", stderr.lock().unwrap()));
        Servers {
            sim: Some(sim),
            gateway: Some(gateway),
            sim_url,
            api_url,
            dir,
        }
    }

    /// Runs one example's command as a reader's shell would; its exit status and what it
    /// printed.
    fn run(&self, command: &str) -> Result<(std::process::ExitStatus, String), String> {
        let bin = Path::new(env!("CARGO_BIN_EXE_connop"))
            .parent()
            .expect("the binary's folder");
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut paths = vec![bin.to_path_buf()];
        paths.extend(std::env::split_paths(&path));
        let script = format!("exec 2>&1\n{command}");
        let mut child = Command::new("sh")
            .args(["-c", &script])
            .current_dir(&self.dir.0)
            .env("PATH", std::env::join_paths(paths).expect("a PATH"))
            .env("API", &self.api_url)
            .env("KEY", KEY)
            .env("SIM", &self.sim_url)
            .env("TOKEN", TOKEN)
            .env("CONNOP_HOME", self.dir.0.join("home"))
            .env_remove("CONNECTOR_GATEWAY_URL")
            .env_remove("CONNECTOR_GATEWAY_TOKEN")
            // Open until the example ends, as a terminal would be: what reads it waits.
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("sh does not start: {e}"))?;
        let stdin = child.stdin.take();
        let mut stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = stdout.read_to_end(&mut bytes);
            let _ = tx.send(bytes);
        });
        let printed = rx.recv_timeout(EXAMPLE_BOUND);
        drop(stdin);
        let pid = child.id();
        let Ok(printed) = printed else {
            if let Some(group) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
            }
            let _ = child.wait();
            return Err(format!("it did not end within {EXAMPLE_BOUND:?}"));
        };
        let status = wait_bounded(child);
        Ok((status, String::from_utf8_lossy(&printed).into_owned()))
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        // A shutdown, so that the agent commands end with the gateway.
        for child in [self.gateway.take(), self.sim.take()].into_iter().flatten() {
            if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            let _ = wait_bounded(child);
        }
    }
}

#[test]
fn every_example_of_the_documents_prints_what_the_document_shows() {
    assert!(
        Command::new("curl")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success()),
        "the documents' examples run curl: install it (apt-get install -y curl)"
    );
    let setup = setup();
    let mut failures = Vec::new();
    let mut ran = 0;
    for doc in documents() {
        let (blocks, _) = blocks(&read(&doc));
        let examples = match examples(&doc, &blocks) {
            Ok(examples) => examples,
            Err(error) => {
                failures.push(error);
                continue;
            }
        };
        if examples.is_empty() {
            continue;
        }
        let name = doc
            .file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
        let servers = Servers::start(&name, &setup);
        for example in examples {
            ran += 1;
            let place = format!("{}:{}", doc.display(), example.line);
            match servers.run(&example.command) {
                Err(why) => failures.push(format!("{place}: {why}")),
                Ok((status, printed)) => {
                    let (expected, printed) = (normalized(&example.expected), normalized(&printed));
                    if !status.success() {
                        failures.push(format!(
                            "{place}: exited with {status}; it printed:\n{printed}"
                        ));
                    } else if !matches(&expected, &printed) {
                        failures.push(format!(
                            "{place}: the output differs from the document's.\n--- the document \
                             shows:\n{expected}\n--- it printed:\n{printed}"
                        ));
                    }
                }
            }
        }
    }
    assert!(ran > 0, "the documents hold runnable examples");
    assert!(
        failures.is_empty(),
        "{} of {ran} examples failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// GitHub's anchor of a heading: lower case, only letters, digits, spaces, `-` and `_` kept,
/// spaces as `-`.
fn anchor_of(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a document's headings; a repeated one gets `-1`, `-2`, … as on GitHub.
fn anchors(prose: &str) -> HashSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = HashSet::new();
    for line in prose.lines() {
        let hashes = line.len() - line.trim_start_matches('#').len();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = anchor_of(&line[hashes..]);
        let count = seen.entry(base.clone()).or_insert(0);
        anchors.insert(if *count == 0 {
            base.clone()
        } else {
            format!("{base}-{count}")
        });
        *count += 1;
    }
    anchors
}

/// The prose without its code spans (a link shown as code is no link).
fn without_code_spans(prose: &str) -> String {
    let mut out = String::with_capacity(prose.len());
    let mut in_code = false;
    for c in prose.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The targets of the links and images of a document's prose, with their lines.
fn links(prose: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (i, line) in prose.lines().enumerate() {
        let line = without_code_spans(line);
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("");
            found.push((i + 1, target.to_owned()));
            rest = &after[end..];
        }
    }
    found
}

/// Why `target`, linked from `doc`, leads nowhere; `None` when it resolves.
fn broken(doc: &Path, target: &str) -> Option<String> {
    if target.starts_with("http://")
        || target.starts_with("https://")
        || target.starts_with("mailto:")
    {
        return None;
    }
    let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
    let file = if path.is_empty() {
        root().join(doc)
    } else {
        let joined = root()
            .join(doc.parent().unwrap_or(Path::new("")))
            .join(path);
        match joined.canonicalize() {
            Ok(file) if file.starts_with(root()) => file,
            Ok(_) => return Some("it leads outside the repository".to_owned()),
            Err(_) => return Some(format!("{path} does not exist")),
        }
    };
    if anchor.is_empty() {
        return None;
    }
    if file.extension().is_none_or(|ext| ext != "md") {
        return Some(format!("{path} is not a document with headings"));
    }
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let (_, prose) = blocks(&text);
    (!anchors(&prose).contains(anchor))
        .then(|| format!("no heading of {} has the anchor #{anchor}", file.display()))
}

#[test]
fn every_relative_link_of_the_documents_leads_somewhere() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let (_, prose) = blocks(&read(&doc));
        for (line, target) in links(&prose) {
            checked += 1;
            if let Some(why) = broken(&doc, &target) {
                failures.push(format!("{}:{line}: ({target}): {why}", doc.display()));
            }
        }
    }
    assert!(checked > 0, "the documents hold links");
    assert!(
        failures.is_empty(),
        "{} of {checked} links lead nowhere:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Folders of the repository whose files are not its own words: build output, fuzz corpora,
/// and the original system's files kept for comparison.
const NOT_OURS: [&str; 7] = [
    ".git",
    "target",
    "fuzz/corpus",
    "runtime-blocking/python/upstream",
    "runtime-blocking/python/seed",
    "runtime-blocking/python/fuzz/corpus",
    "runtime-blocking/python/target",
];

/// The repository's own source and documentation files, as paths from the root: `*.rs`,
/// `*.py`, `*.pyi`, `*.md`, `*.toml`, and every file of `scripts/` and `.ci/`.
fn sources() -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, found: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            return;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = dir.join(entry.file_name());
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                let skipped = NOT_OURS.iter().any(|not| path == Path::new(not))
                    || matches!(
                        name.as_str(),
                        "target" | ".venv" | "__pycache__" | "node_modules"
                    );
                if !skipped {
                    walk(root, &path, found);
                }
            } else if kind.is_file() {
                let script = path.starts_with("scripts") || path.starts_with(".ci");
                let ext = path.extension().map(|e| e.to_string_lossy().into_owned());
                if script || matches!(ext.as_deref(), Some("rs" | "py" | "pyi" | "md" | "toml")) {
                    found.push(path);
                }
            }
        }
    }
    let mut found = Vec::new();
    walk(&root(), Path::new(""), &mut found);
    found.sort();
    found
}

/// The citations in `line` of a document outside the repository: its file name, or a
/// section sign before a number, with or without its name (how its sections are cited).
fn outside_citations(line: &str) -> Vec<String> {
    let name = concat!("SP", "EC");
    let sign = '\u{a7}';
    let mut found: Vec<String> = line
        .matches(&format!("{name}.md"))
        .map(str::to_owned)
        .collect();
    let mut rest = line;
    while let Some(at) = rest.find(sign) {
        let named = rest[..at].ends_with(&format!("{name} "));
        rest = &rest[at + sign.len_utf8()..];
        let number: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        if named {
            found.push(format!("{name} {sign}{number}"));
        } else if number.starts_with(|c: char| c.is_ascii_digit()) {
            found.push(format!("{sign}{number}"));
        }
    }
    found
}

/// The pointers `docs/<name>.md` and `docs/<name>.md#<anchor>` of `line`.
fn doc_pointers(line: &str) -> Vec<String> {
    let is_name = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    let is_anchor = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-');
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("docs/") {
        // `<folder>/docs/…` is some other folder's; a pointer starts at the root.
        let inside = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| is_anchor(c) || c == '/');
        let after = &rest[at + "docs/".len()..];
        rest = after;
        let name = &after[..after.find(|c| !is_name(c)).unwrap_or(after.len())];
        let name = name.trim_end_matches('.');
        if inside || !name.ends_with(".md") {
            continue;
        }
        let mut pointer = format!("docs/{name}");
        if let Some(anchor) = after[name.len()..].strip_prefix('#') {
            let anchor = &anchor[..anchor.find(|c| !is_anchor(c)).unwrap_or(anchor.len())];
            pointer = format!("{pointer}#{anchor}");
        }
        found.push(pointer);
    }
    found
}

#[test]
fn the_sources_cite_only_the_repository() {
    let mut failures = Vec::new();
    let mut pointers = 0;
    let sources = sources();
    assert!(
        sources.iter().any(|p| p.ends_with("core/src/lib.rs")),
        "the walk finds the sources"
    );
    for source in &sources {
        let Ok(text) = std::fs::read_to_string(root().join(source)) else {
            continue;
        };
        for (i, line) in text.lines().enumerate() {
            let place = format!("{}:{}", source.display(), i + 1);
            for citation in outside_citations(line) {
                failures.push(format!(
                    "{place}: cites {citation}, which is not in the repository"
                ));
            }
            for pointer in doc_pointers(line) {
                pointers += 1;
                if let Some(why) = broken(Path::new("README.md"), &pointer) {
                    failures.push(format!("{place}: ({pointer}): {why}"));
                }
            }
        }
    }
    assert!(pointers > 0, "the sources point into docs/");
    assert!(
        failures.is_empty(),
        "{} citations lead outside the repository or nowhere:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn the_pattern_of_an_expected_output_matches_as_documented() {
    assert!(matches("abc", "abc"));
    assert!(!matches("abc", "abcd"));
    assert!(!matches("abc", "xabc"));
    assert!(matches("a…c", "ac"));
    assert!(matches("a…c", "a\nb\nc"));
    assert!(matches("…", ""));
    assert!(matches(
        "{\"id\":\"run_…\",\"n\":…}",
        "{\"id\":\"run_12\",\"n\":3}"
    ));
    assert!(!matches(
        "{\"id\":\"run_…\",\"n\":…}",
        "{\"id\":\"run_12\",\"m\":3}"
    ));
    assert!(matches("x…y…z", "xyz"));
    assert!(matches("x…y…z", "x1y2y3z"));
    assert!(!matches("x…y…z", "x1z"));
    // The last piece may not overlap a middle one.
    assert!(!matches("a…bc…cd", "abcd"));
    assert_eq!(normalized("a  \r\nb\n\n"), "a\nb");
}

#[test]
fn anchors_are_the_ones_github_makes() {
    assert_eq!(anchor_of("`connop connect`"), "connop-connect");
    assert_eq!(anchor_of("Limits (of 12.4)"), "limits-of-124");
    assert_eq!(anchor_of("POST /v1/runs/{id}/stop"), "post-v1runsidstop");
    assert_eq!(anchor_of("Idempotency-Key"), "idempotency-key");
    let set = anchors("# A\n## B\n## B\ntext # not\n#nospace\n");
    assert_eq!(
        set,
        HashSet::from(["a".to_owned(), "b".to_owned(), "b-1".to_owned()])
    );
}
