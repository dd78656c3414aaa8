//! Placeholder for `policy`; its engineer writes it.

use crate::{Error, State};

#[derive(Debug, Default)]
pub(crate) struct PolicyStore {}

impl PolicyStore {
    pub(crate) async fn load(&self, _state: &State) -> Result<(), Error> {
        Ok(())
    }

    pub(crate) fn clear(&self) {}
}
