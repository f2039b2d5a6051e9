//! Data-parallel ranks in lockstep: the ranks of a mixture-of-experts engine whose experts
//! are split over them exchange tokens in every layer, so they step together, each step
//! ending when the slowest rank's does (vLLM runs an empty batch on a rank with nothing to
//! do). The fleet plans each rank's step, then stretches them all to the longest.

use super::Engine;

impl Engine {
    /// Makes the step in flight end at `end_ns`, when that is later than its own end: it
    /// waits for its peers. Only a lockstep engine's single steps stretch.
    pub fn stretch_step(&mut self, end_ns: u64) {
        debug_assert!(self.lockstep, "only a lockstep rank waits for its peers");
        if let Some(plan) = &mut self.plan
            && plan.steps == 1
            && end_ns > plan.start_ns + plan.step_ns
        {
            plan.step_ns = end_ns - plan.start_ns;
        }
    }
}
