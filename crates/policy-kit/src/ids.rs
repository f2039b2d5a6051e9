//! Dense block ids for any host: the ones an ABI 1.1 host sends, or ids interned here from
//! the hashes when an older host sends only those, so a policy's per-block state can be
//! arrays indexed by id either way.

use std::borrow::Cow;

use routerlab_core::Request;
use routerlab_core::hash::BlockInterner;

/// A plugin's source of dense block ids.
#[derive(Default, Debug)]
pub struct DenseIds {
    interner: BlockInterner,
    scratch: Vec<u32>,
}

impl DenseIds {
    /// The request's block ids: the host's, or interned here. Hand an owned result back with
    /// [`DenseIds::recycle`] to reuse its buffer.
    #[inline]
    pub fn of<'r>(&mut self, request: &Request<'r>) -> Result<Cow<'r, [u32]>, String> {
        if let Some(ids) = request.block_ids() {
            return Ok(Cow::Borrowed(ids));
        }
        let mut ids = std::mem::take(&mut self.scratch);
        if !self.interner.intern_all(request.block_hashes(), &mut ids) {
            return Err("more distinct blocks than 32-bit block ids can name".into());
        }
        Ok(Cow::Owned(ids))
    }

    /// Lends the request's block ids to `f` (the host's, or interned here), then keeps the
    /// buffer for the next request.
    #[inline]
    pub fn with<R>(
        &mut self,
        request: &Request<'_>,
        f: impl FnOnce(&[u32]) -> R,
    ) -> Result<R, String> {
        let ids = self.of(request)?;
        let result = f(&ids);
        self.recycle(ids);
        Ok(result)
    }

    /// Takes back the buffer of an owned result.
    #[inline]
    pub fn recycle(&mut self, ids: Cow<'_, [u32]>) {
        if let Cow::Owned(ids) = ids {
            self.scratch = ids;
        }
    }
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::RequestBuilder;

    use super::*;

    #[test]
    fn host_ids_pass_through_and_hashes_are_interned_otherwise() {
        let mut ids = DenseIds::default();
        let with_ids = RequestBuilder::new(1).blocks(&[50, 60]).block_ids(&[7, 8]);
        assert_eq!(&*ids.of(&with_ids.view()).unwrap(), &[7, 8]);
        let first = RequestBuilder::new(2).blocks(&[50, 60]);
        let second = RequestBuilder::new(3).blocks(&[50, 99]);
        let a = ids.of(&first.view()).unwrap().into_owned();
        let b = ids.of(&second.view()).unwrap().into_owned();
        assert_eq!((a.as_slice(), b.as_slice()), (&[0, 1][..], &[0, 2][..]));
    }
}
