//! The data-driven table: several hundred command lines run through `adf_shell` (as the
//! model, through the tool pipeline) and through real bash with GNU coreutils, grep, sed and
//! jq on the same files, in a temp dir with `LC_ALL=C`. Stdout, the exit code, whether
//! anything went to stderr, and the files afterwards must agree. The expected side is computed
//! here by the real tools, so the table cannot drift from them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

const FILES: &[(&str, &str)] = &[
    (
        "notes.md",
        "apple pie\nbanana split\ncherry tart\napple crumble\nbanana bread\nApple cider\n",
    ),
    (
        "data.csv",
        "id,name,score\n3,carol,71\n1,alice,90\n2,bob,85\n10,dave,85\n",
    ),
    ("nums.txt", "10\n9\n100\n-3\n2.5\n9\n1K\n2M\n"),
    (
        "words.txt",
        "the quick  brown fox\njumps over\tthe lazy dog\n\nthe end\nTHE END\nthe end\n",
    ),
    ("versions.txt", "v1.10\nv1.2\nv1.9\nv2.0\nv1.2\n"),
    (
        "log.txt",
        "2024-01-01 INFO start\n2024-01-01 WARN disk 91%\n2024-01-02 ERROR failed: io\n2024-01-02 INFO done\n2024-01-03 ERROR failed: net\n",
    ),
    (
        "people.json",
        r#"[{"name":"ada","age":36,"tags":["x","y"]},{"name":"bob","age":25,"tags":[]},{"name":"cy","age":41,"tags":["y"]}]"#,
    ),
    (
        "doc.json",
        r#"{"a":{"b":[1,2,3],"c":"text"},"n":null,"t":true,"f":1.5,"s":"x y"}"#,
    ),
    ("lines.ndjson", "{\"k\":1}\n{\"k\":2}\n{\"k\":3}\n"),
    ("old.txt", "one\ntwo\nthree\nfour\n"),
    ("new.txt", "one\n2\nthree\nfour\nfive\n"),
    ("noeol.txt", "last line without newline"),
];

const TEXT_FILES: &[&str] = &[
    "notes.md",
    "data.csv",
    "nums.txt",
    "words.txt",
    "versions.txt",
    "log.txt",
];

/// Filters applied to each text file, as `cat FILE | OP` and as `OP FILE`.
const TEXT_OPS: &[&str] = &[
    "sort",
    "sort -r",
    "sort -n",
    "sort -rn",
    "sort -u",
    "sort -f",
    "sort -t, -k2",
    "sort -t, -k3 -n",
    "sort -t, -k3,3nr -k2,2",
    "sort -k2",
    "sort -k2,2 -r",
    "sort -V",
    "sort -h",
    "sort -b",
    "sort -s -k1,1",
    "uniq",
    "uniq -c",
    "uniq -d",
    "uniq -u",
    "uniq -i",
    "uniq -f1",
    "uniq -s2",
    "wc",
    "wc -l",
    "wc -w",
    "wc -c",
    "wc -m",
    "wc -lw",
    "cut -c1-3",
    "cut -c2,4",
    "cut -c5-",
    "cut -d, -f1",
    "cut -d, -f2-",
    "cut -d' ' -f2",
    "cut -d, -f1,3 -s",
    "cut -d, -f2 --complement",
    "tr a-z A-Z",
    "tr -d aeiou",
    "tr -s ' '",
    "tr '[:lower:]' '[:upper:]'",
    "tr -d '[:digit:]'",
    "tr -s '\\n'",
    "tr -cd 'a-z\\n'",
    "tr ',' '\\t'",
    "rev",
    "tac",
    "head -3",
    "head -n 2",
    "head -c 10",
    "head -n -2",
    "tail -2",
    "tail -n +3",
    "tail -c 8",
    "grep a",
    "grep -v e",
    "grep -c o",
    "grep -n '^b'",
    "grep -i APPLE",
    "grep -E '[0-9]+'",
    "grep -o '[a-z]*an[a-z]*'",
    "grep -w the",
    "grep -x 'apple pie'",
    "grep 'a.b'",
    "grep -F '.'",
    "grep -E 'ERROR|WARN'",
    "grep -vc a",
    "grep -e an -e er",
    "grep 'ap\\|ch'",
    "grep -E '^[a-z]+ [a-z]+$'",
    "grep -m 2 a",
    "grep -q zzz",
    "grep '[[:upper:]]'",
    "sed 's/a/A/'",
    "sed 's/a/A/g'",
    "sed -n '2p'",
    "sed '1d'",
    "sed '$d'",
    "sed -E 's/([a-z]+) ([a-z]+)/\\2 \\1/'",
    "sed 's/[0-9]/#/g'",
    "sed -n '/an/p'",
    "sed '2,3d'",
    "sed '/^b/,/^c/d'",
    "sed 's/e/E/2'",
    "sed -n '$='",
    "sed 's/.*/[&]/'",
    "sed -e 's/a/1/' -e 's/e/2/'",
    "sed '3q'",
    "sed -n '2,4p'",
    "sed 's/\\(.\\)\\(.\\)/\\2\\1/'",
    "sed '2!d'",
    "sed 's/ //g'",
    "sort | uniq -c | sort -rn",
    "sort | uniq -c | sort -rn | head -2",
    "tr ' ' '\\n' | sort | uniq -c",
    "cut -c1 | sort | uniq -c",
    "grep -v '^$' | wc -l",
    "rev | sort | rev",
    "sort -r | head -1",
    "tac | tail -1",
];

const JQ_FILTERS: &[(&str, &str)] = &[
    // `input` / `inputs` share the main loop's stream (-n: the loop runs once on null).
    ("lines.ndjson", "-c '[., input]'"),
    ("lines.ndjson", "-c input"),
    ("lines.ndjson", "-n -c '[inputs]'"),
    ("lines.ndjson", "-n 'input.k'"),
    ("lines.ndjson", "-n 'reduce inputs as $x (0; . + $x.k)'"),
    ("lines.ndjson", "-c '[inputs]'"),
    ("people.json", "-n 'input | length'"),
    ("people.json", "-n '[inputs] | length'"),
    ("people.json", "."),
    ("people.json", "-c ."),
    ("people.json", ".[0]"),
    ("people.json", ".[].name"),
    ("people.json", "-r '.[].name'"),
    ("people.json", "length"),
    ("people.json", "map(.age)"),
    ("people.json", "-c 'map(select(.age > 30))'"),
    ("people.json", "'[.[].age] | add'"),
    ("people.json", "'map(.age) | max'"),
    ("people.json", "-c 'sort_by(.age) | map(.name)'"),
    ("people.json", "-c 'group_by(.tags | length) | map(length)'"),
    ("people.json", "-r '.[] | \"\\(.name): \\(.age)\"'"),
    ("people.json", "-c 'map({(.name): .age}) | add'"),
    (
        "people.json",
        "-c '[.[] | select(.tags | index(\"y\"))] | map(.name)'",
    ),
    ("people.json", "-r '.[] | [.name, .age] | @csv'"),
    ("people.json", "-r '.[] | [.name, .age] | @tsv'"),
    ("people.json", "'map(.age) | add / length'"),
    ("people.json", "-c 'to_entries | map(.key)'"),
    ("people.json", "-c '[.[] | .tags[]] | unique'"),
    (
        "people.json",
        "-c 'reduce .[] as $p ({}; .[$p.name] = $p.age)'",
    ),
    ("people.json", "-c '[limit(2; .[])] | map(.name)'"),
    ("people.json", "'any(.[]; .age > 40)'"),
    ("people.json", "'all(.[]; .age > 40)'"),
    ("people.json", "-c 'first, last | .name'"),
    ("people.json", "-c '[paths(type == \"number\")]'"),
    ("people.json", "-c 'del(.[0]) | map(.name)'"),
    ("people.json", "-e '.[5]'"),
    (
        "people.json",
        "-c 'def older: map(select(.age > $n)); older' --argjson n 30",
    ),
    (
        "people.json",
        "-r --arg who bob '.[] | select(.name == $who) | .age'",
    ),
    ("doc.json", "."),
    ("doc.json", "-c .a"),
    ("doc.json", ".a.b[1]"),
    ("doc.json", "-c 'keys'"),
    ("doc.json", "'.a.b | length'"),
    ("doc.json", "-c '.a.b | map(. * 10)'"),
    ("doc.json", "'.n // \"default\"'"),
    ("doc.json", "-r .s"),
    ("doc.json", "'.s | split(\" \")'"),
    (
        "doc.json",
        "-c 'to_entries[] | select(.value | type == \"boolean\")'",
    ),
    ("doc.json", "'.f * 2'"),
    ("doc.json", "-c '[.[] | type]'"),
    ("doc.json", "-r '.a.c | ascii_upcase'"),
    ("doc.json", "-r '.a.c | @base64'"),
    ("doc.json", "-c 'with_entries(select(.value != null))'"),
    ("doc.json", "'.a.c | test(\"ex\")'"),
    ("doc.json", "-c '.a.b | [foreach .[] as $x (0; . + $x)]'"),
    ("doc.json", "-S -c ."),
    ("doc.json", "--tab .a"),
    (
        "doc.json",
        "-c '[label $out | .a.b[] | if . > 1 then ., break $out else . end]'",
    ),
    ("doc.json", "-c '.a | has(\"b\"), has(\"z\")'"),
    ("doc.json", "-j '.s, .s'"),
    ("doc.json", "'.missing.deeper'"),
    ("lines.ndjson", ".k"),
    ("lines.ndjson", "-c -s ."),
    ("lines.ndjson", "-s 'map(.k) | add'"),
    ("lines.ndjson", "-n '[range(5)] | length'"),
    ("lines.ndjson", "-c 'select(.k > 1)'"),
    ("lines.ndjson", "-r '.k | tostring'"),
    (
        "lines.ndjson",
        "-n -r '\"a,b\" | split(\",\") | join(\"-\")'",
    ),
    ("lines.ndjson", "-n -c '[1,[2,[3]]] | flatten'"),
    ("lines.ndjson", "-n '\"aGVsbG8=\" | @base64d'"),
    ("lines.ndjson", "-n -r '\"a b\" | @uri'"),
    ("lines.ndjson", "-n -r '[1,\"x y\"] | @sh'"),
    ("lines.ndjson", "-n -c '{a:1} * {b:2}'"),
    ("lines.ndjson", "-n 'try error(\"x\") catch .'"),
    ("lines.ndjson", "-n -c '[.[]?]'"),
    ("lines.ndjson", "-n '\"abc\" | ltrimstr(\"a\")'"),
    ("lines.ndjson", "-n -c '[splits(\"a\"; \"g\")]' <<< ''"),
];

/// Lines about the shell itself: quoting, expansion, chaining, redirects, heredocs, files.
const SHELL_LINES: &[&str] = &[
    "echo hello",
    "echo -n x; echo y",
    "echo -e 'a\\tb\\nc'",
    "echo 'single $X'",
    "echo \"double $UNSET\"",
    "echo a\\ b \\$c",
    "X=1; echo $X",
    "X='a  b'; echo $X",
    "X='a  b'; echo \"$X\"",
    "X=a; Y=${X}b; echo $Y",
    "X=1; X=2 echo ok; echo $X",
    "echo $(echo a   b)",
    "echo \"$(echo a   b)\"",
    "echo $(echo $(echo nested))",
    "A=$(cat old.txt | wc -l); echo lines=$A",
    "true && echo a || echo b",
    "false && echo a || echo b",
    "false || false || echo c",
    "true; false; echo $?",
    "false | true; echo $?",
    "true | false; echo $?",
    "echo a; false && echo b; echo c",
    "! true 2>/dev/null; echo done",
    "echo $?",
    "false; echo $? $?",
    "nosuchcommand 2>/dev/null; echo $?",
    "cat missing.txt 2>/dev/null; echo $?",
    "cat missing.txt; echo status $?",
    "echo x > out.txt",
    "echo x > out.txt; echo y >> out.txt; cat out.txt",
    "sort notes.md > sorted.txt; head -2 sorted.txt",
    "echo hi | tee a.txt b.txt",
    "echo one > f.txt; echo two | tee -a f.txt; cat f.txt",
    "wc -l < notes.md",
    "grep apple < notes.md | wc -l",
    "cat notes.md | grep -c apple > count.txt; cat count.txt",
    "echo err 1>&2",
    "echo err >&2 2>/dev/null",
    "cat missing.txt 2>&1 | wc -l",
    "cat missing.txt 2> errs.txt; wc -l < errs.txt",
    "echo both > o.txt 2>&1; cat o.txt",
    "cat <<EOF\nline one\nline two\nEOF",
    "X=v; cat <<EOF\nvalue $X\n$(echo sub)\nEOF",
    "cat <<'EOF'\nraw $X $(nope)\nEOF",
    "cat <<-EOF\n\tindented\n\t\tmore\n\tEOF",
    "cat <<EOF | tr a-z A-Z\nshout\nEOF",
    "cat <<EOF > here.txt\nsaved\nEOF\ncat here.txt",
    "cat <<\"EOF\"\n$HOME\nEOF",
    "echo a # trailing comment\n# whole line\necho b",
    "#!/bin/bash\necho shebang",
    "echo one\necho two",
    "echo a && \\\necho b",
    "echo a |\ntr a b",
    "echo \"multi\nline\"",
    "echo 'it''s'",
    "echo \"it's\"",
    "echo \"quote \\\" inside\"",
    "echo \"back\\\\slash\"",
    "echo 'back\\slash'",
    "echo \"dollar \\$X\"",
    "echo $",
    "echo a=b",
    "echo --flag",
    "echo -- -n",
    "echo ''",
    "echo \"\" | wc -c",
    "X=; echo \"[$X]\"",
    "echo ${UNSET}x",
    "cp notes.md copy.md; cat copy.md | wc -l",
    "mv notes.md moved.md; cat moved.md | head -1; cat notes.md 2>/dev/null || echo gone",
    "rm old.txt; cat old.txt 2>/dev/null || echo removed",
    "rm -f nothing.txt; echo $?",
    "touch empty.txt; wc -c < empty.txt",
    "sed -i 's/one/ONE/' old.txt; cat old.txt",
    "diff old.txt new.txt",
    "diff old.txt old.txt; echo same $?",
    "diff old.txt new.txt > d.txt; echo $?",
    "echo a b c | xargs -n 1 echo item",
    "printf_not_here 2>/dev/null || echo fallback",
    "cat data.csv | xargs -I{} echo '<{}>'",
    "echo 3 1 2 | tr ' ' '\\n' | sort -n | xargs",
    "cat noeol.txt",
    "cat noeol.txt | wc -l",
    "wc -c noeol.txt",
    "tail -1 noeol.txt",
    "head -1 notes.md data.csv",
    "cat notes.md data.csv | wc -l",
    "grep -c a notes.md data.csv",
    "grep -h a notes.md data.csv",
    "grep -l apple notes.md data.csv",
    "grep a notes.md data.csv | head -3",
    "wc -l notes.md data.csv",
    "cat - < notes.md | head -1",
    "echo x | cat - old.txt",
    "sort nums.txt | uniq | wc -l",
    "jq -r '.[].name' people.json | sort -r",
    "jq -c '.[]' people.json | wc -l",
    "jq length people.json > n.txt; cat n.txt",
    "echo '{\"x\":[1,2]}' | jq -c '.x | map(.+1)'",
    "echo '[3,1,2]' | jq -c 'sort'",
    "echo '\"hi\"' | jq -r .",
    "echo 'null' | jq -e . ; echo $?",
    "echo bad | jq . 2>/dev/null; echo $?",
    "jq 'invalid syntax here' doc.json 2>/dev/null; echo $?",
    "echo '{\"a\":1}' | jq '.a.b' 2>/dev/null; echo $?",
    "cat lines.ndjson | jq -s -c 'map(.k)'",
    "cat old.txt | jq -R -n -c '[inputs]'",
    "jq -R -c '[., input]' old.txt",
    "jq -R -c '[., input]' notes.md 2>/dev/null; echo $?",
    "echo '1 2 3' | jq -n '[inputs] | add'",
    "echo '1 2' | jq -n 'input, input, input' 2>/dev/null; echo $?",
    "echo 5 | jq '. * 2' | xargs echo result",
];

struct Observed {
    stdout: String,
    stderr_empty: bool,
    exit_code: i32,
    files: BTreeMap<String, String>,
}

fn bash(line: &str) -> Observed {
    let dir = tempfile::tempdir().unwrap();
    for (path, content) in FILES {
        std::fs::write(dir.path().join(path), content).unwrap();
    }
    let output = Command::new("bash")
        .arg("-c")
        .arg(line)
        .current_dir(dir.path())
        .env("LC_ALL", "C")
        .env_remove("X")
        .env_remove("Y")
        .env_remove("A")
        .stdin(Stdio::null())
        .output()
        .expect("bash runs (scripts/setup.d installs the reference tools)");
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        files.insert(
            name,
            String::from_utf8_lossy(&std::fs::read(entry.path()).unwrap()).into_owned(),
        );
    }
    Observed {
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr_empty: output.stderr.is_empty(),
        exit_code: output.status.code().unwrap_or(-1),
        files,
    }
}

/// An agent holding [`FILES`], created once and closed; each row runs on a copy of it.
fn template() -> &'static std::path::Path {
    static TEMPLATE: std::sync::OnceLock<(tempfile::TempDir, std::path::PathBuf)> =
        std::sync::OnceLock::new();
    let (_, path) = TEMPLATE.get_or_init(|| {
        let (dir, mut file) = common::agent();
        for (path, content) in FILES {
            common::put(&mut file, path, content);
        }
        file.close().unwrap();
        let path = dir.path().join("agent.adf");
        (dir, path)
    });
    path
}

fn shell(line: &str) -> Observed {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("row.adf");
    std::fs::copy(template(), &copy).unwrap();
    let mut file = adf_store::AdfFile::open(&copy).unwrap();
    let value = common::shell_call(
        &mut file,
        &common::model(),
        line,
        &adf_runtime::tools::approval::ApproveAll,
    )
    .unwrap();
    let run = common::to_run(&value);
    let mut files: BTreeMap<String, String> = file
        .file_list("")
        .unwrap()
        .into_iter()
        .filter_map(|info| common::text(&file, &info.path).map(|t| (info.path, t)))
        .collect();
    // The agent's own starting files are not the table's concern.
    for (path, text) in starting_files() {
        if !FILES.iter().any(|(p, _)| p == path) && files.get(path) == Some(text) {
            files.remove(path);
        }
    }
    Observed {
        stdout: run.stdout,
        stderr_empty: run.stderr.is_empty(),
        exit_code: run.exit_code,
        files,
    }
}

/// The files a fresh agent starts with.
fn starting_files() -> &'static BTreeMap<String, String> {
    static FRESH: std::sync::OnceLock<BTreeMap<String, String>> = std::sync::OnceLock::new();
    FRESH.get_or_init(|| {
        let (_dir, fresh) = common::agent();
        fresh
            .file_list("")
            .unwrap()
            .into_iter()
            .filter_map(|info| common::text(&fresh, &info.path).map(|t| (info.path, t)))
            .collect()
    })
}

fn all_lines() -> Vec<String> {
    let mut lines = Vec::new();
    for file in TEXT_FILES {
        for op in TEXT_OPS {
            lines.push(format!("cat {file} | {op}"));
        }
    }
    // The same filters with the file as an argument, on two inputs.
    for file in ["notes.md", "data.csv"] {
        for op in TEXT_OPS
            .iter()
            .filter(|op| !op.contains('|') && !op.starts_with("tr"))
        {
            lines.push(format!("{op} {file}"));
        }
    }
    for (file, filter) in JQ_FILTERS {
        if filter.contains("<<<") {
            continue;
        }
        lines.push(format!("jq {filter} {file}"));
    }
    lines.extend(SHELL_LINES.iter().map(|l| (*l).to_owned()));
    lines
}

/// Rows where bash itself is not the reference: `!` (pipeline negation) is refused by design,
/// and invalid JSON input exits 2 as jq 1.7+ does (Debian's jq 1.6 says 4).
fn own_semantics(line: &str) -> bool {
    line.starts_with("! ") || line.starts_with("echo bad | jq")
}

fn check_rows(lines: &[String]) -> Vec<String> {
    let mut failures = Vec::new();
    for line in lines {
        if own_semantics(line) {
            continue;
        }
        let expected = bash(line);
        let got = shell(line);
        let mut problems = Vec::new();
        if got.stdout != expected.stdout {
            problems.push(format!(
                "stdout\n    bash:  {:?}\n    shell: {:?}",
                expected.stdout, got.stdout
            ));
        }
        if got.exit_code != expected.exit_code {
            problems.push(format!(
                "exit bash {} shell {}",
                expected.exit_code, got.exit_code
            ));
        }
        if got.stderr_empty != expected.stderr_empty {
            problems.push(format!(
                "stderr empty: bash {} shell {}",
                expected.stderr_empty, got.stderr_empty
            ));
        }
        if got.files != expected.files {
            problems.push(format!(
                "files\n    bash:  {:?}\n    shell: {:?}",
                expected.files.keys().collect::<Vec<_>>(),
                got.files.keys().collect::<Vec<_>>()
            ));
            for (path, text) in &expected.files {
                if got.files.get(path) != Some(text) {
                    problems.push(format!(
                        "    {path}: bash {:?} shell {:?}",
                        text,
                        got.files.get(path)
                    ));
                }
            }
        }
        if !problems.is_empty() {
            failures.push(format!("{line:?}\n  {}", problems.join("\n  ")));
        }
    }
    failures
}

#[test]
fn tol_53_table_rows_match_bash_and_gnu_tools() {
    let lines = all_lines();
    assert!(lines.len() >= 300, "the table has {} rows", lines.len());
    // Rows are independent (each its own copy of the agent and its own temp dir): check them
    // on a few threads.
    let chunk = lines.len().div_ceil(4);
    let failures: Vec<String> = std::thread::scope(|scope| {
        let workers: Vec<_> = lines
            .chunks(chunk)
            .map(|rows| scope.spawn(move || check_rows(rows)))
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| worker.join().unwrap())
            .collect()
    });
    assert!(
        failures.is_empty(),
        "{} of {} rows differ from bash:\n{}",
        failures.len(),
        lines.len(),
        failures.join("\n")
    );
}
