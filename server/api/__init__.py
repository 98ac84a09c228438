"""The `/v1` HTTP API: routes (`routes/`, one router per resource), their dependencies
(`deps`), access control (`auth`), error responses (`errors`), request limits (`limits`) and
metrics (`metrics`). The logic the routes call lives in the `server` package itself."""
