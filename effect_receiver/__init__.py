"""The EffectReceiver: writes one effect per operation id and answers whether it happened (docs/effect-receiver.md)."""
