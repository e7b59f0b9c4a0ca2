//! Behaviours that once broke the limit, kept behind switches so that negative-control tests can
//! show the regression tests, the simulator and the model checker each catch them.
//!
//! Every switch is off by default and is not part of any configuration file (`serde(skip)` where
//! it sits in a config): only tests turn them on. They exist only with the `known-bugs` feature,
//! which the tests, the simulator and the model checker enable and nothing shipped does: without
//! it [`KnownBugs`] has no fields and every switch is a `const fn` returning `false`, so the
//! compiler removes the broken rule beside each right one (`cargo tree -e features -p leasehold`
//! shows no `known-bugs`). The rules read a switch by its method (`bugs.ack_by_amount_only()`).

/// Declares [`KnownBugs`] from its list of switches: with the `known-bugs` feature a struct of
/// `pub` flags, without it a struct of none; either way one `const fn` per switch to read it.
macro_rules! known_bugs {
    ($(#[$struct_doc:meta])* pub struct KnownBugs { $($(#[$doc:meta])* pub $name:ident,)* }) => {
        $(#[$struct_doc])*
        #[cfg(feature = "known-bugs")]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub struct KnownBugs {
            $($(#[$doc])* pub $name: bool,)*
        }

        $(#[$struct_doc])*
        #[cfg(not(feature = "known-bugs"))]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub struct KnownBugs {}

        impl KnownBugs {
            $(
                #[doc = concat!("Whether `", stringify!($name), "` is on (always `false` without the `known-bugs` feature).")]
                #[cfg(feature = "known-bugs")]
                #[inline(always)]
                pub const fn $name(&self) -> bool {
                    self.$name
                }

                #[doc = concat!("Whether `", stringify!($name), "` is on (always `false` without the `known-bugs` feature).")]
                #[cfg(not(feature = "known-bugs"))]
                #[inline(always)]
                pub const fn $name(&self) -> bool {
                    false
                }
            )*
        }
    };
}

known_bugs! {
    /// One switch per hole in docs/FINDINGS.md that has one: each switch names its entry, where
    /// the tests, simulator paths and model-check presets that catch it are listed.
    pub struct KnownBugs {
        /// A DC manager spends under its newest *unexpired* DC lease, so when a newer lease expires
        /// first it goes back to an older, larger one it has already reported superseded
        /// (docs/FINDINGS.md#f1).
        pub dc_falls_back_to_older_lease,
        /// A new best-effort term hands out the emergency allowance before the previous term's pod
        /// leases (which may include it) have expired (docs/FINDINGS.md#f2).
        pub emergency_before_quiet_period,
        /// A pod applies leases addressed to another process with its id (no incarnation;
        /// docs/FINDINGS.md#f3).
        pub pod_ignores_incarnation,
        /// A leader's freshness is measured from when its renewal's reply arrived, not from when
        /// the renewal was sent (docs/FINDINGS.md#f4).
        pub leader_fresh_from_reply,
        /// A leader (or claimant) whose write timed out forgets it once a read shows it has not
        /// landed yet; when it lands later, a later write's send is credited for it and the term
        /// outlasts what the followers allow (docs/FINDINGS.md#f14).
        pub leader_forgets_unresolved_writes,
        /// A new coordinator term takes a DC's floor out of its books as soon as its configuration
        /// lowers it, and names a raised floor at once, although a DC cut off from the coordinator
        /// keeps spending the last floor it read (floors never expire; docs/FINDINGS.md#f12).
        pub floor_change_at_once,
        /// After a capacity shrinks, a holder may renew at the level of a lease that predates it, so
        /// the excess outlives the old lease. Found by the simulator (storm seed 23): a DC
        /// manager's budget shrank with a new, smaller DC lease; a pod's claim cut under the larger
        /// one licensed a share of the smaller one that outlived it, and once the coordinator
        /// stopped counting the old DC lease the pods held more than the DC's lease
        /// (docs/FINDINGS.md#f8).
        pub renewal_reuses_inherited_claim,
        /// A DC manager takes the floor any record names, a delayed older one included, so it can go
        /// back up to a floor the coordinator already stopped reserving (docs/FINDINGS.md#f13).
        pub dc_takes_any_floor,
        /// The coordinator stops reserving an older, larger floor as soon as a DC reports a floor in
        /// use that fits the newest one, without knowing whether the DC has read the newest one: a
        /// DC whose ledger watch lags may still move up to a raise a later term took back (1,030/s
        /// against 1,000/s; docs/FINDINGS.md#f15).
        pub floor_confirmed_by_amount,
        /// A leader that finds the ledger record lost waits one lifetime of its *own* DC lease TTL,
        /// although an earlier term may have issued longer ones (a rolling restart that shortened
        /// `dc_ttl_ms` and lost the record: 2,000/s against 1,000/s; docs/FINDINGS.md#f16).
        pub lost_record_waits_own_ttl,
        /// A DC manager acks a DC lease (and reports a lowered floor in use) once its *amount*
        /// covers the pods' leases, although pod leases cut under an older, longer DC lease may
        /// outlive it on the coordinator's books (a takeover that shortened `dc_ttl_ms`: 1,250/s
        /// against 1,000/s; docs/FINDINGS.md#f19).
        pub ack_by_amount_only,
        /// A DC manager grants pod leases within its budget at the moment only: a lease cut from the
        /// floor alone may outlive an older, larger DC lease whose room a renewal leaned on, after
        /// the coordinator stops counting it (docs/FINDINGS.md#f25).
        pub pod_lease_outlives_counted_dc_lease,
        /// A leader trusts a ledger record of a term below the fence's as the newest, although the
        /// fence's term may have written newer records that the store lost (1,990/s against
        /// 1,000/s; docs/FINDINGS.md#f26).
        pub record_behind_fence_trusted,
        /// A term that takes a lower limit live (`CoordinatorCore::reconfigure`) starts its books
        /// afresh at the new capacity, forgetting the DC leases and floors already out
        /// (docs/FINDINGS.md#f30).
        pub reconfigure_forgets_leases,
        /// A DC manager takes a limit's removal and pod rules from any value of its ledger record it
        /// reads, an older one (a watch replaying the key's history, a delayed delivery after a
        /// direct read) included: a removed limit's best-effort allowance comes back
        /// (docs/FINDINGS.md#f34).
        pub record_rules_take_any_revision,
        /// A DC-manager term that could not read the ledger directly (its DC cut off from the hub)
        /// uses the floor and fail mode its watch delivered, which may be older than what its
        /// predecessor confirmed: the floor the coordinator moved elsewhere is spent twice
        /// (docs/FINDINGS.md#f36).
        pub term_uses_watched_floor,
        /// A DC manager confirms a floor (`DcReport.floor_version`) before it has written it to its
        /// DC's `FloorConfirmations`: a successor cut off from the ledger then trusts a watched floor
        /// older than one its predecessor confirmed (docs/FINDINGS.md#f37).
        pub floor_confirmed_unpersisted,
        /// The RLQS issuer renews an Envoy token bucket for free even when the renewal may arrive
        /// after the assignment expired, so Envoy starts a new, full bucket the issuer never paid
        /// for (docs/FINDINGS.md#f44).
        pub rlqs_late_renewal_free,
        /// The RLQS issuer sends a new Envoy token bucket (a first one, a change, one after a
        /// lapse) without taking its `max_tokens` from its pool, although Envoy starts it full (or
        /// at the old one's fill ratio while lagging workers still drain the old one;
        /// docs/FINDINGS.md#f45).
        pub rlqs_new_bucket_unpaid,
        /// The RLQS issuer lends under the largest lease it has seen, not the one in force (a
        /// shrink goes unheeded; docs/FINDINGS.md#f43).
        pub rlqs_keeps_largest_lease,
        /// A DC manager counts a DC lease's TTL from when it read the lease, not from the send of
        /// the report it answers: a lease stored late (a ledger write that went unanswered and
        /// landed later) outlives its end on the coordinator's books (docs/FINDINGS.md#f47).
        pub dc_lease_counts_from_receipt,
        /// A new DC-manager term waits out only its own pod-lease bounds, not those its
        /// predecessor's term record carried: a rolling restart that lowers `pod_ttl_ms` lets the
        /// new term give the floor again while the old term's pods still spend it
        /// (docs/FINDINGS.md#f48).
        pub term_ignores_predecessor_bounds,
        /// A coordinator term adopts a ledger group its term wrote at a revision newer than it
        /// expected as its own late write without asking the fence, although a single-replica bucket
        /// that lost its tail may have gone back to that term's older record after a newer term
        /// wrote: the deposed term then writes an epoch below the newest (storm seeds 201 and 739;
        /// docs/FINDINGS.md#f50). Applied by the caller of `judge_group_write` (it passes the
        /// term's own epoch as the fence's).
        pub adoption_ignores_fence,
        /// A DC-manager term says it answers for its predecessor's pod leases, so the
        /// coordinator moves the predecessor's DC leases under it, but it does not count them
        /// in its own books: it hands the predecessor's share out again while the old term's
        /// pods still spend it (docs/FINDINGS.md#f69).
        pub successor_ignores_predecessor_leases,
        /// A DC-manager term that answers for its predecessor's pod leases spends the floor in
        /// its quiet period (so that continued leases the floor backed keep their size) without
        /// counting the floor among what the predecessor's pods may spend: it grants the floor
        /// again while the old term's pods that were not continued still spend it
        /// (docs/FINDINGS.md#f70).
        pub successor_spends_floor_uncounted,
    }
}
