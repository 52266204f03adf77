"""What a person reads without the widget: a cell's transcript, `%flue history` and `%flue status`."""
