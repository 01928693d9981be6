"""Alerts from the judgements gputui already makes: rules.py decides what is wrong now (pure),
delivery.py tells people (a command, a webhook) on a thread of its own. No Textual here.
"""
