"""Search rules shared by every index adapter: BM25 and the fusion (`rules`), text analysis (`terms`), query
vectors, filters, the time words of a query (`time_phrases`), and making an index again from the store
(`reindex`). Above the kernel; below trust and the families."""
