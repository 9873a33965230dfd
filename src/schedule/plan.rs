//! Whole-group plans: every transfer of every member, assembled from the
//! per-member schedule functions, plus a verifier used by the tests and the CLI.

use serde::{Deserialize, Serialize};

use super::{Algorithm, NodeSchedule, Schedule, ScheduleError};

/// One transfer of a whole-group plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanTransfer {
    /// Logical step, from 0.
    pub step: usize,
    /// Sending rank.
    pub from: usize,
    /// Receiving rank.
    pub to: usize,
    /// Block number.
    pub block: usize,
}

/// Every transfer of every member for one (algorithm, n, k), in step order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// The algorithm's CLI name.
    pub algorithm: String,
    /// Group size.
    pub nodes: usize,
    /// Number of blocks.
    pub blocks: usize,
    /// Number of logical steps.
    pub steps: usize,
    /// The transfers, sorted by (step, from).
    pub transfers: Vec<PlanTransfer>,
}

impl Plan {
    /// Assemble the plan from each member's [`Schedule::outgoing`].
    pub fn new(algorithm: Algorithm, nodes: usize, blocks: usize) -> Result<Self, ScheduleError> {
        let schedules = (0..nodes)
            .map(|rank| NodeSchedule::new(algorithm, nodes, rank))
            .collect::<Result<Vec<_>, _>>()?;
        let steps = schedules.first().map_or(0, |s| s.total_steps(blocks));
        let mut transfers = Vec::new();
        for step in 0..steps {
            for (from, schedule) in schedules.iter().enumerate() {
                if let Some(t) = schedule.outgoing(blocks, step) {
                    transfers.push(PlanTransfer {
                        step,
                        from,
                        to: t.peer,
                        block: t.block,
                    });
                }
            }
        }
        Ok(Plan {
            algorithm: algorithm.name().to_owned(),
            nodes,
            blocks,
            steps,
            transfers,
        })
    }
}
