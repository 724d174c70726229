"""HTTP transport: decode AdmissionReviews, hand them to the pipeline, encode the answers."""
