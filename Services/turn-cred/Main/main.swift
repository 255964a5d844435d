import TurnCredService
import WhisperShared

await ServiceMain.run(TurnCredSettings.self) { settings, logger in
    buildTurnCred(settings: settings, logger: logger).assembly
}
