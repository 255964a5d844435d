// An app imports one module: the protocol's types (frames, errors, keys' proofs, crypto)
// come with the SDK.
@_exported import WhisperProtocol
