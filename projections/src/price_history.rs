//! The stored price history: one row per price a provider set, for ever (ADR 0007).
//!
//! The in-memory market keeps only the prices that can still be in force and those set in the
//! last day ([`crate::market::KeptPrice`]); the prices page and API show a provider's whole
//! history, which they read here. A price set is one event, so the fold needs no state from
//! before a batch.

use gpunex_domain::DomainEvent;
use gpunex_domain::market::{MarketEvent, PriceSet};

/// The projection's name, and its checkpoint's.
pub const PRICES: &str = "prices";

/// The event types the fold reads (a page's other events are not decoded).
pub const EVENT_TYPES: [&str; 1] = [gpunex_domain::events::PRICE_SET];

/// One stored price: the price set recorded at `position`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPrice {
    pub position: u64,
    pub set: PriceSet,
}

/// The price an event sets, if it sets one.
pub fn price(position: u64, event: &DomainEvent) -> Option<StoredPrice> {
    match event {
        DomainEvent::Market(MarketEvent::PriceSet(set)) => Some(StoredPrice {
            position,
            set: set.clone(),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use gpunex_domain::market::AvailabilitySet;
    use gpunex_domain::money::Usdc;
    use gpunex_domain::onboarding::Availability;
    use gpunex_domain::time::Timestamp;
    use uuid::Uuid;

    use super::*;

    #[test]
    fn a_price_set_is_a_stored_price_and_nothing_else_is() {
        let provider_id = Uuid::from_u128(2);
        let set = PriceSet {
            provider_id,
            model_id: "h100-80gb".to_owned(),
            price_micro_usdc: Usdc::from_micros(2_500_000),
            effective_at: Timestamp::from_unix_micros(10),
            set_at: Timestamp::from_unix_micros(5),
            set_by: "provider".to_owned(),
        };
        let event = DomainEvent::Market(MarketEvent::PriceSet(set.clone()));
        assert_eq!(event.event_type(), EVENT_TYPES[0]);
        assert_eq!(price(7, &event), Some(StoredPrice { position: 7, set }));
        let schedule = DomainEvent::Market(MarketEvent::AvailabilitySet(AvailabilitySet {
            provider_id,
            availability: Availability::AlwaysOn,
            set_at: Timestamp::from_unix_micros(5),
        }));
        assert_eq!(price(8, &schedule), None);
    }
}
