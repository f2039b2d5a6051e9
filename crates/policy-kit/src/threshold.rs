//! The shape of every threshold detector: one rule applied to each endpoint's status, its
//! answer written to that endpoint's flag. Written once so a detector is its rule alone.

use routerlab_core::{EndpointStatus, Endpoints};

/// Sets `unavailable[pos]` to `overloaded(endpoint at pos)` for every list position.
#[inline]
pub fn flag_where(
    endpoints: &Endpoints<'_>,
    unavailable: &mut [bool],
    mut overloaded: impl FnMut(&EndpointStatus<'_>) -> bool,
) {
    for (flag, endpoint) in unavailable.iter_mut().zip(endpoints.iter()) {
        *flag = overloaded(&endpoint);
    }
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::EndpointsBuilder;

    use super::*;

    #[test]
    fn each_flag_is_the_rule_of_its_own_endpoint() {
        let endpoints = EndpointsBuilder::new(3).running(0, 5).running(2, 9);
        let mut flags = [true; 3];
        flag_where(&endpoints.view(), &mut flags, |e| e.running() > 4);
        assert_eq!(flags, [true, false, true]);
    }
}
