//! The held-out table: shell lines and their bash results, written from the tools guide and
//! bash before the interpreter existed, and never edited to fit it. Each row is a command
//! line, the files before it, and the stdout and exit code bash (with GNU coreutils and jq)
//! gives for it. A row that fails here is a bug in the interpreter, not in the row.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

/// (command line, files before as (path, content), expected stdout, expected exit code)
type Row = (
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static str,
    i32,
);

const NOTES: &str = "apple pie\nbanana split\ncherry tart\napple crumble\nbanana bread\n";
const PEOPLE: &str = r#"[{"name":"ada","age":36},{"name":"bob","age":25},{"name":"cy","age":41}]"#;

const ROWS: &[Row] = &[
    ("echo hello world", &[], "hello world\n", 0),
    ("echo -n hi", &[], "hi", 0),
    ("echo 'a  b'   c", &[], "a  b c\n", 0),
    ("echo \"x\\\"y\"", &[], "x\"y\n", 0),
    ("echo a\\ b", &[], "a b\n", 0),
    ("true && echo yes", &[], "yes\n", 0),
    ("false && echo yes", &[], "", 1),
    ("false || echo no", &[], "no\n", 0),
    ("false && echo a ; echo b", &[], "b\n", 0),
    ("true || echo a && echo b", &[], "b\n", 0),
    ("false; echo $?", &[], "1\n", 0),
    ("true; echo $?", &[], "0\n", 0),
    ("X=5; echo $X ${X}x", &[], "5 5x\n", 0),
    ("echo \"$UNSET_VAR_Q\"end", &[], "end\n", 0),
    ("echo '$HOME'", &[], "$HOME\n", 0),
    ("echo $(echo inner)", &[], "inner\n", 0),
    ("echo \"a $(echo b c) d\"", &[], "a b c d\n", 0),
    ("echo one # a comment", &[], "one\n", 0),
    (
        "cat notes.md | grep apple",
        &[("notes.md", NOTES)],
        "apple pie\napple crumble\n",
        0,
    ),
    ("grep -c banana notes.md", &[("notes.md", NOTES)], "2\n", 0),
    ("grep -v a notes.md", &[("notes.md", NOTES)], "", 1),
    (
        "grep zzz notes.md; echo $?",
        &[("notes.md", NOTES)],
        "1\n",
        0,
    ),
    (
        "grep -E 'pie|tart' notes.md",
        &[("notes.md", NOTES)],
        "apple pie\ncherry tart\n",
        0,
    ),
    (
        "grep -n cherry notes.md",
        &[("notes.md", NOTES)],
        "3:cherry tart\n",
        0,
    ),
    (
        "grep -i APPLE notes.md | wc -l",
        &[("notes.md", NOTES)],
        "2\n",
        0,
    ),
    (
        "cut -d' ' -f1 notes.md | sort | uniq -c",
        &[("notes.md", NOTES)],
        "      2 apple\n      2 banana\n      1 cherry\n",
        0,
    ),
    (
        "sort -r notes.md | head -n 2",
        &[("notes.md", NOTES)],
        "cherry tart\nbanana split\n",
        0,
    ),
    (
        "head -2 notes.md",
        &[("notes.md", NOTES)],
        "apple pie\nbanana split\n",
        0,
    ),
    (
        "tail -n 1 notes.md",
        &[("notes.md", NOTES)],
        "banana bread\n",
        0,
    ),
    ("wc -l < notes.md", &[("notes.md", NOTES)], "5\n", 0),
    ("wc -w notes.md", &[("notes.md", NOTES)], "10 notes.md\n", 0),
    ("echo hello | tr a-z A-Z", &[], "HELLO\n", 0),
    ("echo hello | tr -d l", &[], "heo\n", 0),
    ("echo abc | rev", &[], "cba\n", 0),
    (
        "tac notes.md | head -1",
        &[("notes.md", NOTES)],
        "banana bread\n",
        0,
    ),
    ("echo 'a-b-c' | sed 's/-/+/g'", &[], "a+b+c\n", 0),
    (
        "echo 'foo 12' | sed -E 's/([a-z]+) ([0-9]+)/\\2 \\1/'",
        &[],
        "12 foo\n",
        0,
    ),
    ("printf_missing_cmd 2>/dev/null; echo $?", &[], "127\n", 0),
    ("echo hi > out.txt && cat out.txt", &[], "hi\n", 0),
    (
        "echo a > f.txt; echo b >> f.txt; cat f.txt",
        &[],
        "a\nb\n",
        0,
    ),
    ("N=7; cat <<EOF\nn=$N\nEOF", &[], "n=7\n", 0),
    ("N=7; cat <<'EOF'\nn=$N\nEOF", &[], "n=$N\n", 0),
    ("cat <<-EOF\n\tindented\n\tEOF", &[], "indented\n", 0),
    (
        "echo '{\"a\":1,\"b\":[1,2]}' | jq .b",
        &[],
        "[\n  1,\n  2\n]\n",
        0,
    ),
    (
        "jq -r '.[].name' people.json",
        &[("people.json", PEOPLE)],
        "ada\nbob\ncy\n",
        0,
    ),
    (
        "jq -c 'map(select(.age > 30)) | map(.name)' people.json",
        &[("people.json", PEOPLE)],
        "[\"ada\",\"cy\"]\n",
        0,
    ),
    (
        "jq '[.[].age] | add' people.json",
        &[("people.json", PEOPLE)],
        "102\n",
        0,
    ),
    ("jq -n '[range(3)] | map(. * 2)' -c", &[], "[0,2,4]\n", 0),
    (
        "jq -r 'def twice: . * 2; .[] | .age | twice' people.json",
        &[("people.json", PEOPLE)],
        "72\n50\n82\n",
        0,
    ),
    ("echo '\"aGk=\"' | jq -r '@base64d'", &[], "hi\n", 0),
    ("echo 3 | jq -e '. > 5'", &[], "false\n", 1),
    ("printf_x=1; echo ${printf_x}", &[], "1\n", 0),
    ("echo a b c | xargs -n 1 echo", &[], "a\nb\nc\n", 0),
    (
        "echo x | tee copy.txt | tr x y; cat copy.txt",
        &[],
        "y\nx\n",
        0,
    ),
    ("echo 'c\nb\na' | sort", &[], "a\nb\nc\n", 0),
    ("echo $( echo $( echo deep ) )", &[], "deep\n", 0),
    ("cat missing.txt; echo $?", &[], "1\n", 0),
    (
        "echo 10 2 33 | tr ' ' '\\n' | sort -n",
        &[],
        "2\n10\n33\n",
        0,
    ),
    ("echo b a b | tr ' ' '\\n' | sort -u", &[], "a\nb\n", 0),
    ("echo 'k1,v1' | cut -d, -f2", &[], "v1\n", 0),
    ("echo abcdef | cut -c2-4", &[], "bcd\n", 0),
];

#[test]
fn held_out_rows_match_bash() {
    let mut failures = Vec::new();
    for (line, files, stdout, exit) in ROWS {
        let run = common::run_line(files, line);
        if run.stdout != *stdout || run.exit_code != *exit {
            failures.push(format!(
                "{line:?}\n  expected exit {exit} stdout {stdout:?}\n  got      exit {} stdout {:?} stderr {:?}",
                run.exit_code, run.stdout, run.stderr
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} held-out rows differ from bash:\n{}",
        failures.len(),
        ROWS.len(),
        failures.join("\n")
    );
}
