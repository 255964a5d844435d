import WhisperMessaging

/// The name the router has always used for its routing metrics (tests build routers by hand with it).
typealias RouterMetrics = RoutingMetrics
