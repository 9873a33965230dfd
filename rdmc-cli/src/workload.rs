//! A workload of many groups at once, as `rdmc-bench` gives it to every
//! `rdmc member --bench --workload FILE`: the groups (each a list of
//! member ranks, the root first), the writes (a group and a size each, in
//! the order their roots issue them) and how many writes each root keeps in
//! flight.
//!
//! The file is text, one item per line (blank lines and `#` comments
//! skipped):
//!
//! ```text
//! window 2
//! group 0 3 7 12
//! group 1 4 0 9
//! write 0 12000000
//! write 1 640
//! ```
//!
//! `window K`: each root keeps at most K of its writes in flight (issued,
//! not yet acknowledged by every member); `group ID RANK...`: group ID
//! (numbered 0, 1, 2, ... in order) of these members, the root first;
//! `write GROUP SIZE`: one message of SIZE bytes to GROUP.

use std::fmt::Write as _;

use anyhow::{Context as _, anyhow, bail};

/// One write: a message of `size` bytes to group `group`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOp {
    /// Index into [`Workload::groups`].
    pub group: usize,
    /// Bytes.
    pub size: u64,
}

/// Groups, writes and the window of writes in flight per root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    /// Each group's member ranks, the root first.
    pub groups: Vec<Vec<u32>>,
    /// The writes, in the order their roots issue them.
    pub writes: Vec<WriteOp>,
    /// Writes each root keeps in flight.
    pub window: usize,
}

impl Workload {
    /// The root (first member) of write `w`'s group.
    pub fn root_of(&self, w: &WriteOp) -> u32 {
        self.groups[w.group][0]
    }

    /// The largest write, in bytes (0 without writes).
    pub fn largest(&self) -> u64 {
        self.writes.iter().map(|w| w.size).max().unwrap_or(0)
    }

    /// Bytes every replica receives in total: each write's size times its
    /// group's receivers.
    pub fn replica_bytes(&self) -> u64 {
        self.writes
            .iter()
            .map(|w| w.size * (self.groups[w.group].len() as u64 - 1))
            .sum()
    }

    /// The workload as the text [`parse`] reads.
    pub fn to_text(&self) -> String {
        let mut out = format!("window {}\n", self.window);
        for (id, members) in self.groups.iter().enumerate() {
            let _ = write!(out, "group {id}");
            for m in members {
                let _ = write!(out, " {m}");
            }
            out.push('\n');
        }
        for w in &self.writes {
            let _ = writeln!(out, "write {} {}", w.group, w.size);
        }
        out
    }
}

/// Read a workload for a cluster of `members` processes; an error names the
/// line and what is wrong with it.
pub fn parse(text: &str, members: usize) -> anyhow::Result<Workload> {
    let mut workload = Workload {
        groups: Vec::new(),
        writes: Vec::new(),
        window: 1,
    };
    let mut window_seen = false;
    for (index, line) in text.lines().enumerate() {
        read_line(line, members, &mut workload, &mut window_seen)
            .with_context(|| format!("line {}", index + 1))?;
    }
    Ok(workload)
}

/// Add one line of a workload to `workload`.
fn read_line(
    line: &str,
    members: usize,
    workload: &mut Workload,
    window_seen: &mut bool,
) -> anyhow::Result<()> {
    let line = line.split('#').next().unwrap_or("").trim();
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        [] => {}
        ["window", k] => {
            if *window_seen {
                bail!("a second `window`");
            }
            *window_seen = true;
            let k = usize::try_from(number(k, "window")?).context("window too large")?;
            if k == 0 {
                bail!("window must be at least 1");
            }
            workload.window = k;
        }
        ["group", id, ranks @ ..] => {
            let id = number(id, "group id")?;
            if id != workload.groups.len() as u64 {
                bail!(
                    "group {id} out of order (expected group {})",
                    workload.groups.len()
                );
            }
            let mut group = Vec::with_capacity(ranks.len());
            for r in ranks {
                let r = number(r, "rank")?;
                if r >= members as u64 {
                    bail!("rank {r} is not a member (the cluster has {members})");
                }
                let r = r as u32;
                if group.contains(&r) {
                    bail!("rank {r} appears twice in group {id}");
                }
                group.push(r);
            }
            if group.len() < 2 {
                bail!("group {id} needs at least 2 members");
            }
            workload.groups.push(group);
        }
        ["write", group, size] => {
            let group = number(group, "group")?;
            if group >= workload.groups.len() as u64 {
                bail!("write to group {group}, not defined before");
            }
            let size = number(size, "size")?;
            if size == 0 {
                bail!("a write needs at least 1 byte");
            }
            workload.writes.push(WriteOp {
                group: group as usize,
                size,
            });
        }
        _ => bail!("cannot read {line:?}"),
    }
    Ok(())
}

fn number(word: &str, what: &str) -> anyhow::Result<u64> {
    word.parse()
        .map_err(|_| anyhow!("{what} {word:?} is not a number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Workload {
        Workload {
            groups: vec![vec![0, 1, 2], vec![2, 0, 1], vec![1, 2]],
            writes: vec![
                WriteOp { group: 0, size: 10 },
                WriteOp { group: 2, size: 1 },
                WriteOp { group: 1, size: 7 },
            ],
            window: 3,
        }
    }

    #[test]
    fn text_round_trips() {
        let w = sample();
        assert_eq!(parse(&w.to_text(), 3).unwrap(), w);
        assert_eq!(w.largest(), 10);
        assert_eq!(w.replica_bytes(), 10 * 2 + 1 + 7 * 2);
        assert_eq!(w.root_of(&w.writes[2]), 2);
    }

    #[test]
    fn comments_and_blank_lines_are_skipped_and_window_defaults_to_one() {
        let w = parse("# a workload\n\ngroup 0 1 0  # two\nwrite 0 5\n", 2).unwrap();
        assert_eq!(w.window, 1);
        assert_eq!(w.groups, vec![vec![1, 0]]);
        assert_eq!(w.writes, vec![WriteOp { group: 0, size: 5 }]);
    }

    #[test]
    fn bad_lines_are_named() {
        let cases = [
            (
                "group 1 0 1\n",
                "line 1: group 1 out of order (expected group 0)",
            ),
            (
                "group 0 0 3\n",
                "line 1: rank 3 is not a member (the cluster has 3)",
            ),
            ("group 0 0 0\n", "line 1: rank 0 appears twice in group 0"),
            ("group 0 1\n", "line 1: group 0 needs at least 2 members"),
            (
                "write 0 5\n",
                "line 1: write to group 0, not defined before",
            ),
            (
                "group 0 0 1\nwrite 0 0\n",
                "line 2: a write needs at least 1 byte",
            ),
            (
                "group 0 0 1\nwrite 0 x\n",
                "line 2: size \"x\" is not a number",
            ),
            ("window 0\n", "line 1: window must be at least 1"),
            ("window 2\nwindow 2\n", "line 2: a second `window`"),
            ("send 1 2\n", "line 1: cannot read \"send 1 2\""),
        ];
        for (text, error) in cases {
            let got = format!("{:#}", parse(text, 3).unwrap_err());
            assert_eq!(got, error, "{text:?}");
        }
    }
}
