"""Money: the price table, the cost model, the run ledger and its fold, bookings, run limits and budget periods."""
