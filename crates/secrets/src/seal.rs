//! The seal: `sys/init` splits a root key into Shamir shares, `sys/unseal` collects them,
//! `sys/seal` forgets the key. Placeholder interface; the barrier engineer writes it.

use std::sync::Arc;

use storage::Storage;

use crate::barrier::Barrier;
use crate::{Error, State};

#[derive(Debug)]
pub(crate) struct Seal {
    #[allow(dead_code, reason = "placeholder")]
    storage: Arc<dyn Storage>,
    barrier: Arc<Barrier>,
}

impl Seal {
    pub(crate) fn new(storage: Arc<dyn Storage>, barrier: Arc<Barrier>) -> Seal {
        Seal { storage, barrier }
    }

    pub(crate) fn is_unsealed(&self) -> bool {
        !self.barrier.is_sealed()
    }
}

/// `cairn dev`: initialise with one share if needed, unseal, and create the root token.
pub(crate) async fn dev_init_and_unseal(_state: &State) -> Result<(), Error> {
    Ok(())
}
