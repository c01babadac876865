//! One reconcile's native cure: the driver (pure, `decide`'s [`Drive`]) and the executor
//! ([`NativeExecutor`]) in turn, until the driver is done. The loop chooses nothing: each step
//! is the driver's, each answer the executor's.

use std::time::Instant;

use hairpin_planner::native::NativeRecord;
use hairpin_planner::{ClusterSnapshot, Plan, PlannerConfig};

use super::NativeParams;
use super::act::NativeExecutor;
use super::decide::{Cx, Drive, Next};
use super::memory::NativeMemory;
use super::state::Now;
use crate::Error;
use crate::fight::Fights;

/// What one reconcile's native cure reads and changes (the loop's memory: the cure's part and
/// the write fights, those over `ipMode` among them), and its executor.
pub(crate) struct NativeRun<'a> {
    pub executor: NativeExecutor<'a>,
    pub params: &'a NativeParams,
    pub planner: &'a PlannerConfig,
    pub mem: &'a mut NativeMemory,
    pub fights: &'a mut Fights,
}

impl NativeRun<'_> {
    /// The plan's native steps executed, in the driver's order, each with the clock read as
    /// it is decided. Returns when to look again (a probe running, a failed cure due for
    /// another try); stops at the first error the executor cannot answer with.
    pub(crate) async fn run(
        self,
        plan: &Plan,
        snapshot: &ClusterSnapshot,
    ) -> Result<Option<Instant>, Error> {
        let Self {
            mut executor,
            params,
            planner,
            mem,
            fights,
        } = self;
        let mut drive = Drive::new(NativeRecord::read(snapshot, planner));
        let (server, mut answer) = (String::new(), None);
        let mut cx = Cx {
            params,
            mem,
            fights,
            plan,
            snapshot,
            server,
        };
        loop {
            match drive.next(&mut cx, answer.take(), &Now::read()) {
                Next::Step(step) => answer = executor.execute(step).await?,
                Next::Done(requeue) => return Ok(requeue),
            }
        }
    }
}
