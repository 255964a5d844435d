// The protocol library (frames, validation, limits, canonical bytes, IDs, error codes,
// backoff, clocks) is part of every service's vocabulary: importing WhisperShared
// brings it along. The client SDK imports WhisperProtocol alone.
@_exported import WhisperProtocol
