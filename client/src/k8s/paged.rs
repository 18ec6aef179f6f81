//! Lists read page by page: a fleet's kinds hold thousands of objects, and one request for all
//! of them is a spike of memory on both sides. Shared by the live state's lists and the status
//! records' ([`crate::live`], [`crate::status`]).

use kube::api::{ListParams, ObjectList};

/// Objects asked for per list request ([`paged`]).
pub const PAGE: u32 = 250;

/// Reads a list page by page (`fetch` asks for one), reducing each page's items with `reduce`
/// before asking for the next; the reduced items and the number of requests made, also when
/// one failed. A continue token that expired between pages (the API server keeps them about
/// five minutes) fails the list, as any other error: the caller tries again.
pub async fn paged<T, V, Fut>(
    lp: &ListParams,
    mut fetch: impl FnMut(ListParams) -> Fut,
    reduce: impl Fn(&T) -> V,
) -> (Result<Vec<V>, kube::Error>, usize)
where
    T: Clone,
    Fut: std::future::Future<Output = Result<ObjectList<T>, kube::Error>>,
{
    let mut lp = lp.clone().limit(PAGE);
    let mut out = Vec::new();
    let mut requests = 0;
    loop {
        requests += 1;
        let page = match fetch(lp.clone()).await {
            Ok(page) => page,
            Err(e) => return (Err(e), requests),
        };
        out.extend(page.items.iter().map(&reduce));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => lp = lp.continue_token(&token),
            None => return (Ok(out), requests),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;

    /// Pages of numbers, as an API server would serve them: `limit` at a time, the offset of
    /// the next page as its continue token.
    fn page(lp: &ListParams, all: &[u32]) -> ObjectList<u32> {
        let from: usize = lp
            .continue_token
            .as_deref()
            .map_or(0, |t| t.parse().unwrap());
        let to = (from + lp.limit.unwrap() as usize).min(all.len());
        ObjectList {
            types: Default::default(),
            metadata: ListMeta {
                continue_: (to < all.len()).then(|| to.to_string()),
                ..Default::default()
            },
            items: all[from..to].to_vec(),
        }
    }

    #[tokio::test]
    async fn a_list_is_read_page_by_page_to_its_end() {
        let all: Vec<u32> = (0..PAGE * 2 + 7).collect();
        let asked = std::sync::Mutex::new(Vec::new());
        let fetch = |lp: ListParams| {
            asked.lock().unwrap().push(lp.limit);
            let p = page(&lp, &all);
            async move { Ok(p) }
        };
        let (listed, requests) = paged(&ListParams::default(), fetch, |n: &u32| n * 10).await;
        assert_eq!(
            listed.unwrap(),
            all.iter().map(|n| n * 10).collect::<Vec<_>>()
        );
        assert_eq!(requests, 3);
        assert!(asked.lock().unwrap().iter().all(|l| *l == Some(PAGE)));
    }

    #[tokio::test]
    async fn a_page_that_fails_fails_the_list() {
        let all: Vec<u32> = (0..PAGE * 3).collect();
        let fetch = |lp: ListParams| {
            let result = match lp.continue_token {
                // The third page: the token expired (410 Gone).
                Some(t) if t == (PAGE * 2).to_string() => Err(kube::Error::Api(Box::new(
                    kube::core::Status::failure("expired", "Expired").with_code(410),
                ))),
                _ => Ok(page(&lp, &all)),
            };
            async move { result }
        };
        let (listed, requests) = paged(&ListParams::default(), fetch, |n: &u32| *n).await;
        assert!(listed.is_err());
        assert_eq!(requests, 3);
    }
}
