"""Tests of the EffectReceiver service."""
