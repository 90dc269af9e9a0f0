//! The state every handler shares: the store, the clock, the read models this process hosts,
//! the listing index, and the HTTP side's settings and counters.

use gpunex_store::Store;

#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    /// The process's clock: the store's, so events and decisions share one "now".
    pub clock: gpunex_domain::clock::SharedClock,
    pub credentials: gpunex_app::ReadModels,
    pub login_limiter: crate::login_limit::LoginLimiter,
    pub fleet: gpunex_app::presence::FleetConfig,
    /// The marketplace listings, rebuilt as the log moves.
    pub listings: gpunex_app::listings::ListingIndex,
    /// Payout rules and the platform's bank account.
    pub payouts: std::sync::Arc<crate::payout_run::PayoutConfig>,
    /// Connection and request limits.
    pub limits: crate::http_server::ServerLimits,
    /// Requests in flight per token.
    pub token_load: crate::http_server::TokenLoad,
    /// What `GET /metrics` reports.
    pub metrics: std::sync::Arc<crate::metrics::Metrics>,
    /// Whether `GET /metrics` answers requests from the loopback interface without credentials.
    pub metrics_loopback: bool,
    /// Whether the browser session cookie is `Secure` (the platform is reached over https).
    pub secure_cookies: bool,
    /// The agent installer served at `/agent/install.sh`.
    pub installer: crate::installer::Installer,
}

impl AppState {
    /// Loads the credential registry from the log and keeps it current.
    pub async fn load(store: Store) -> Result<AppState, gpunex_store::StoreError> {
        let credentials = gpunex_app::ReadModels::load(&store).await?;
        let listings = gpunex_app::listings::ListingIndex::default();
        let clock = store.clock().clone();
        listings.rebuild(&credentials, clock.now());
        tokio::spawn(gpunex_app::listings::run_listing_index(
            credentials.clone(),
            listings.clone(),
            clock.clone(),
        ));
        let metrics = std::sync::Arc::new(crate::metrics::Metrics::started_at(clock.now()));
        Ok(AppState {
            store,
            clock,
            credentials,
            login_limiter: crate::login_limit::LoginLimiter::default(),
            fleet: gpunex_app::presence::FleetConfig::default(),
            listings,
            payouts: std::sync::Arc::default(),
            limits: crate::http_server::ServerLimits::default(),
            token_load: crate::http_server::TokenLoad::default(),
            metrics,
            metrics_loopback: true,
            secure_cookies: false,
            installer: crate::installer::Installer::default(),
        })
    }

    /// Sets the agent installer served at `/agent/install.sh`.
    pub fn with_installer(mut self, installer: crate::installer::Installer) -> AppState {
        self.installer = installer;
        self
    }

    /// The command executor over this process's store and read models, deciding at its clock.
    pub fn executor(&self) -> gpunex_app::command::Executor<'_> {
        gpunex_app::command::Executor::new(&self.store, &self.credentials)
    }

    /// Sets whether the browser session cookie is `Secure` (the public URL is https).
    pub fn with_secure_cookies(mut self, secure: bool) -> AppState {
        self.secure_cookies = secure;
        self
    }

    /// Sets whether `GET /metrics` admits loopback requests without credentials.
    pub fn with_metrics_loopback(mut self, admitted: bool) -> AppState {
        self.metrics_loopback = admitted;
        self
    }

    /// Sets the payout rules and the platform's bank account.
    pub fn with_payout_config(mut self, config: crate::payout_run::PayoutConfig) -> AppState {
        self.payouts = std::sync::Arc::new(config);
        self
    }

    /// Sets the connection and request limits.
    pub fn with_limits(mut self, limits: crate::http_server::ServerLimits) -> AppState {
        self.limits = limits;
        self
    }

    /// Sets how presence is judged, and whether simulated GPUs may be listed.
    pub fn with_fleet_config(mut self, config: gpunex_app::presence::FleetConfig) -> AppState {
        self.fleet = config;
        self.listings.set_dev_mode(config.dev_mode);
        self
    }
}
