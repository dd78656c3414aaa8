//! The barrier: every value the secrets service stores is encrypted here (AES-256-GCM with a
//! keyring of terms) before it reaches the shared store. Placeholder interface; the barrier
//! engineer writes the implementation.

use std::sync::Arc;

use storage::Storage;

use crate::Error;

#[derive(Debug)]
pub(crate) struct Barrier {
    #[allow(dead_code, reason = "placeholder")]
    storage: Arc<dyn Storage>,
}

impl Barrier {
    pub(crate) fn new(storage: Arc<dyn Storage>) -> Barrier {
        Barrier { storage }
    }

    pub(crate) fn is_sealed(&self) -> bool {
        true
    }

    #[allow(dead_code, reason = "placeholder")]
    pub(crate) async fn get(&self, _key: &str) -> Result<Option<Vec<u8>>, Error> {
        Err(Error::Sealed)
    }
}
