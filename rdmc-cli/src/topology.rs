//! `--racks` and `--slow`: the group's racks and slow members, shared by
//! `rdmc demo`, `rdmc member` and `rdmc plan`.

use anyhow::{anyhow, bail};
use clap::Args;
use rdmc::GroupConfig;
use rdmc::schedule::Topology;

/// `--racks`: a number of racks the members are dealt into in turn (member
/// `r` in rack `r mod R`, as a placement service hands hosts out), or one
/// rack name per member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RackSpec {
    /// `R`: member `r` in rack `r mod R`.
    Interleaved(u32),
    /// `a,b,c,...`: member `r` in rack `list[r]`.
    Each(Vec<u32>),
}

impl RackSpec {
    /// The rack of each of `n` members.
    pub(crate) fn racks(&self, n: usize) -> Vec<u32> {
        match self {
            RackSpec::Interleaved(racks) => (0..n)
                .map(|r| (r as u64 % u64::from(*racks)) as u32)
                .collect(),
            RackSpec::Each(list) => list.clone(),
        }
    }
}

// A clap value parser (`value_parser = ...`): its error is one message,
// which clap prints after naming the option and the value given; nothing
// chains below it, so it stays a `String` (as in clap's own examples)
// rather than an `anyhow::Error`. So do the other parsers in this file.
fn parse_racks(text: &str) -> Result<RackSpec, String> {
    let number = |s: &str| {
        s.trim()
            .parse::<u32>()
            .map_err(|e| format!("not a rack number: {s:?} ({e})"))
    };
    if text.contains(',') {
        text.split(',')
            .map(number)
            .collect::<Result<_, _>>()
            .map(RackSpec::Each)
    } else {
        match number(text)? {
            0 => Err("at least 1 rack".to_owned()),
            racks => Ok(RackSpec::Interleaved(racks)),
        }
    }
}

/// `--slow`: ranks, comma-separated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ranks(pub(crate) Vec<usize>);

fn parse_ranks(text: &str) -> Result<Ranks, String> {
    text.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            s.trim()
                .parse::<usize>()
                .map_err(|e| format!("not a rank: {s:?} ({e})"))
        })
        .collect::<Result<_, _>>()
        .map(Ranks)
}

/// The group's racks and slow members on the command line.
#[derive(Debug, Default, Args)]
pub(crate) struct TopologyArgs {
    /// The members' racks, for `--algorithm hybrid`: a number R (member r in
    /// rack r mod R: members dealt out across racks in turn), or one rack
    /// number per member in rank order, comma-separated (e.g. 0,0,1,1).
    /// Every member must give the same.
    #[arg(long, value_parser = parse_racks, value_name = "R|LIST")]
    pub(crate) racks: Option<RackSpec>,
    /// Ranks of members known to be slow, comma-separated: with the
    /// binomial pipeline and the hybrid they only receive, fed by a relay
    /// (a fast member outside the pipeline) and then the root. Every member
    /// must give the same.
    #[arg(long, value_parser = parse_ranks, value_name = "RANKS")]
    pub(crate) slow: Option<Ranks>,
}

impl TopologyArgs {
    /// `config` with these racks and slow members, for a group of `n`
    /// (checked: a wrong rack count or a rank outside the group is an error).
    pub(crate) fn apply(&self, config: GroupConfig, n: usize) -> anyhow::Result<GroupConfig> {
        let mut config = config;
        if let Some(racks) = &self.racks {
            config = config.with_racks(racks.racks(n));
        }
        if let Some(Ranks(slow)) = &self.slow {
            config = config.with_slow_members(slow.iter().copied());
        }
        config.topology(n).map_err(|e| anyhow!("{e}"))?;
        Ok(config)
    }

    /// [`TopologyArgs::apply`] for a group whose rank `r` is node
    /// `nodes[r]`, where the racks and slow members name nodes (as ranks of
    /// a group listing the nodes in order).
    pub(crate) fn apply_to_nodes(
        &self,
        config: GroupConfig,
        nodes: &[usize],
    ) -> anyhow::Result<GroupConfig> {
        let n = nodes.len();
        let mut config = config;
        if let Some(racks) = &self.racks {
            let by_node = racks.racks(n);
            if by_node.len() != n {
                bail!(
                    "{} racks given for a group of {n} members (one per member, in rank order)",
                    by_node.len()
                );
            }
            config = config.with_racks(nodes.iter().map(|&node| by_node[node]).collect());
        }
        if let Some(Ranks(slow)) = &self.slow {
            if let Some(&bad) = slow.iter().find(|&&s| s >= n) {
                bail!("slow member {bad} is not in a group of {n}");
            }
            let ranks = (0..n).filter(|&r| slow.contains(&nodes[r]));
            config = config.with_slow_members(ranks);
        }
        Ok(config)
    }

    /// The schedule topology of a group of `n`.
    pub(crate) fn topology(&self, n: usize) -> anyhow::Result<Topology> {
        self.apply(GroupConfig::new(), n)?
            .topology(n)
            .map_err(|e| anyhow!("{e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rack_specs() {
        assert_eq!(parse_racks("2"), Ok(RackSpec::Interleaved(2)));
        assert_eq!(parse_racks("0,0,1"), Ok(RackSpec::Each(vec![0, 0, 1])));
        assert!(parse_racks("0").is_err());
        assert!(parse_racks("x").is_err());
        assert!(parse_racks("1,,2").is_err());
        assert_eq!(RackSpec::Interleaved(2).racks(5), [0, 1, 0, 1, 0]);
        assert_eq!(parse_ranks("3, 5"), Ok(Ranks(vec![3, 5])));
        assert!(parse_ranks("a").is_err());
    }

    #[test]
    fn bad_topologies_are_errors() {
        let args = TopologyArgs {
            racks: Some(RackSpec::Each(vec![0, 1])),
            slow: None,
        };
        let e = args.topology(3).unwrap_err();
        assert!(
            e.to_string().contains("2 racks given for a group of 3"),
            "{e}"
        );
        let args = TopologyArgs {
            racks: None,
            slow: Some(Ranks(vec![7])),
        };
        let e = args.topology(3).unwrap_err();
        assert!(e.to_string().contains("slow member 7"), "{e}");
        let args = TopologyArgs {
            racks: Some(RackSpec::Interleaved(2)),
            slow: Some(Ranks(vec![1])),
        };
        let t = args.topology(4).unwrap();
        assert_eq!(t.racks(), [0, 1, 0, 1]);
        assert_eq!(t.slow_members(), [1]);
    }
}
